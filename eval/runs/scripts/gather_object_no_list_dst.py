"""mistake: ported from Accelerate's `gather_object`, which returns the gathered list, the evaluation
writes `all_preds = dist.gather_object(preds, dst=0)` on every rank; torch's gather_object needs the
output list on the destination and returns None, so rank 0 refuses the call (its list is None) while
rank 1 goes into the gather and is killed by torchrun.
label: none
alternates: D20
first_rank: 0
launch: python -m torch.distributed.run --nproc-per-node 2 eval/runs/scripts/gather_object_no_list_dst.py
source: none known
written: session 13c, unseen
"""

import torch
import torch.distributed as dist
import torch.nn as nn


def evaluate(model, rank):
    torch.manual_seed(rank)
    preds = []
    with torch.no_grad():
        for _ in range(3):
            preds.extend(model(torch.randn(4, 10)).argmax(-1).tolist())
    return preds


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = nn.Linear(10, 5).eval()
    preds = evaluate(model, rank)
    all_preds = dist.gather_object(preds, dst=0)
    if rank == 0:
        flat = [p for part in all_preds for p in part]
        print(f"accuracy over {len(flat)} predictions")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
