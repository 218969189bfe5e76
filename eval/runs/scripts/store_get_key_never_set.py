"""mistake: rank 0 publishes the path of the best checkpoint in a key-value store (`store.set("best_ckpt", path)`)
only when the validation loss beats `best`, which the script initialises to 0.0 instead of infinity, so the
key is never set; rank 1 loads the best checkpoint by `store.get("best_ckpt")`, which waits for the key until
the store's timeout (10 s here) while rank 0 goes on to the final barrier.
label: D21
alternates: D19, MN3
first_rank: none
launch: python -m torch.distributed.run --nproc-per-node 2 eval/runs/scripts/store_get_key_never_set.py
source: none known
written: session 13, unseen
"""

import os
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]) + 1, world,
        is_master=rank == 0, timeout=timedelta(seconds=10),
    )
    model = DDP(nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    best = 0.0
    for epoch in range(2):
        x, y = torch.randn(16, 8), torch.randn(16, 1)
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        val = loss.item()
        if rank == 0 and val < best:
            best = val
            path = f"/tmp/r13_store/epoch{epoch}.pt"
            store.set("best_ckpt", path)
        print(f"rank {rank} epoch {epoch} val {val:.4f}", flush=True)
    if rank != 0:
        path = store.get("best_ckpt").decode()
        print(f"rank {rank}: best checkpoint {path}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
