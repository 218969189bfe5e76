"""Rank 0 asks before overwriting an existing output folder.

Hang class: a rank held at a prompt nobody answers (stdin of a launched job).
Label: P8
Odd ranks: 0
Launch: torchrun 2

The output folder exists from a previous run, so rank 0 asks `Overwrite? [y/N]` with `input()`
and waits for an answer that never comes; rank 1 waits in the barrier after the check.
"""

import os
import tempfile

import torch
import torch.distributed as dist


def check_output_dir(path: str) -> None:
    if os.path.exists(path):
        answer = input(f"{path} exists. Overwrite? [y/N] ")
        if answer.strip().lower() != "y":
            raise SystemExit("not overwriting")


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    out = os.path.join(tempfile.gettempdir(), "run-output")
    os.makedirs(out, exist_ok=True)
    if rank == 0:
        check_output_dir(out)
    dist.barrier()
    for step in range(100):
        t = torch.ones(3)
        dist.all_reduce(t)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
