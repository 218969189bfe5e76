"""mistake: the worker function handed to mp.spawn is defined inside main() (a closure over the
config), which the spawn start method cannot pickle.
label: E14
first_rank: none
launch: python eval/runs/scripts/spawn_local_function.py
source: none known
written: session 9, unseen
"""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def main():
    config = {"world_size": 2, "lr": 0.1}
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ.setdefault("MASTER_PORT", "29547")

    def train(rank):
        dist.init_process_group("gloo", rank=rank, world_size=config["world_size"])
        t = torch.full((1,), config["lr"])
        dist.all_reduce(t)
        print(rank, t.item(), flush=True)
        dist.destroy_process_group()

    mp.spawn(train, nprocs=config["world_size"])


if __name__ == "__main__":
    main()
