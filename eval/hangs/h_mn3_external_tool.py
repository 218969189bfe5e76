"""Each rank runs an external preprocessing tool on its shard; on one rank the tool never ends.

Hang class: a rank blocked on a child process (subprocess.run with no timeout) while the other
waits in a collective.
Label: MN3
Odd ranks: 1
Launch: mp.spawn 2
Held out: written after the first fixes, measured once

Rank 1's tool waits for ever (here: a child python that sleeps); rank 1 waits in
`subprocess.run`, rank 0 in the barrier after preprocessing.
"""

import os
import subprocess
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

TOOL = "import sys, time; time.sleep(0.1 if sys.argv[1] == '0' else 10**6)"


def preprocess(rank: int) -> None:
    subprocess.run([sys.executable, "-c", TOOL, str(rank)], check=True)


def run(rank: int, world_size: int) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = os.environ.get("HANG_MASTER_PORT", "29512")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    preprocess(rank)
    dist.barrier()
    t = torch.ones(1)
    dist.all_reduce(t)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(run, args=(2,), nprocs=2)
