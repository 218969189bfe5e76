"""mistake: the mp.spawn script hard-codes its rendezvous port from the environment, and a
leftover process (here a forgotten `python -m http.server` a colleague started on that port)
already listens there, so rank 0 cannot create the store.
label: D4
first_rank: none
launch: (python -m http.server $MASTER_PORT --bind 127.0.0.1 >/dev/null 2>&1 & echo $! > /tmp/r8_httpd.pid) ; sleep 2 ; python eval/runs/scripts/spawn_port_taken.py ; kill $(cat /tmp/r8_httpd.pid)
source: none known
"""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def run(rank, world_size):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    t = torch.tensor([float(rank)])
    dist.all_reduce(t)
    print(f"rank {rank}: {t.item()}")
    dist.destroy_process_group()


def main():
    os.environ.setdefault("MASTER_PORT", "29500")
    mp.spawn(run, args=(2,), nprocs=2)


if __name__ == "__main__":
    main()
