"""mistake: the training loop "skips bad batches" with `try: ... except RuntimeError: continue`
around the forward (fine on one GPU); under DDP, rank 1 skips a batch whose sample has the wrong
length, so it runs one gradient all-reduce fewer than rank 0, and rank 0 is left alone in its last
step's all-reduce after rank 1 has finished (init timeout 10 s).
label: D9
alternates: D19
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/skip_bad_batch_rank1.py
source: none known
written: session 10b, unseen
"""

from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def batches(rank):
    for step in range(5):
        width = 7 if (rank == 1 and step == 2) else 8
        yield torch.randn(4, width), torch.randn(4, 1)


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=10))
    rank = dist.get_rank()
    model = DDP(nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step, (x, y) in enumerate(batches(rank)):
        try:
            loss = nn.functional.mse_loss(model(x), y)
        except RuntimeError as err:
            print(f"[rank {rank}] skipping bad batch at step {step}: {err}", flush=True)
            continue
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"[rank {rank}] step {step} loss {loss.item():.4f}", flush=True)
    print(f"[rank {rank}] epoch done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
