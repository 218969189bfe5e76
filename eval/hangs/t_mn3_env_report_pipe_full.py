"""Rank 0 records the environment report (a child process's output) for the run's metadata with
`Popen(stdout=PIPE)` and `proc.wait()` before reading the pipe; the report is larger than the pipe
buffer, so the child blocks writing and rank 0 blocks in `wait()`.

Hang class: rank 0 stuck in something outside torch (a child process); the others wait in a
collective until the timeout.
Label: MN3
Odd ranks: 0
Launch: torchrun 2
Held out: session 11e

Rank 0 waits in `Popen.wait()` (its child blocked writing 300 kB into a 64 kB pipe); rank 1 waits
in `dist.barrier()`.
"""

import subprocess
import sys

import torch
import torch.distributed as dist

REPORT = "import sys\nfor i in range(6000):\n    print(f'pkg-{i:05d}==1.0.{i} ' + 'x' * 40)\n"


def environment_report() -> str:
    proc = subprocess.Popen([sys.executable, "-c", REPORT], stdout=subprocess.PIPE, text=True)
    proc.wait()
    assert proc.stdout is not None
    return proc.stdout.read()


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if rank == 0:
        report = environment_report()
        print(f"env report: {len(report)} chars", flush=True)
    dist.barrier()
    x = torch.ones(2)
    dist.all_reduce(x)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
