"""mistake: the evaluation set is split by hand (`eval_set[rank::world]`, 101 examples, so rank 0
gets 51 and rank 1 50) and predictions are gathered batch by batch with `dist.all_gather_object`;
with batch size 10 rank 0 has a sixth batch, so it waits in a gather rank 1 never enters (rank 1
has moved on to the final barrier; timeout 15 s).
label: D9
alternates: D22
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/eval_batchwise_gather_uneven.py
source: none known
written: session 13c, unseen
"""

from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=15))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    eval_set = [(torch.randn(6), i % 2) for i in range(101)]
    mine = eval_set[rank::world]
    model = nn.Linear(6, 2).eval()
    all_preds = []
    with torch.no_grad():
        for i in range(0, len(mine), 10):
            batch = torch.stack([x for x, _ in mine[i : i + 10]])
            preds = model(batch).argmax(-1).tolist()
            gathered = [None] * world
            dist.all_gather_object(gathered, preds)
            all_preds.extend(p for part in gathered for p in part)
    if rank == 0:
        print(f"gathered {len(all_preds)} predictions")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
