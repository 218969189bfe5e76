"""mistake: the script was copied from a three-machine setup and keeps
`init_process_group(init_method="tcp://...", world_size=3)`; it is now started by hand as two
processes (one `python` per rank, rank from argv), so the rendezvous waits for a third rank that
never comes and both processes time out.
label: D1
alternates: P1
first_rank: none
launch: python eval/runs/scripts/tcp_init_world_size_three.py 0 & sleep 0.5; python eval/runs/scripts/tcp_init_world_size_three.py 1; wait
source: none known
written: session 12c, unseen
"""

import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

WORLD_SIZE = 3


def main():
    rank = int(sys.argv[1])
    port = os.environ.get("MASTER_PORT", "23456")
    dist.init_process_group(
        backend="gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=WORLD_SIZE,
        timeout=timedelta(seconds=10),
    )
    t = torch.ones(2) * rank
    dist.all_reduce(t)
    print(f"rank {rank}: {t.tolist()}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
