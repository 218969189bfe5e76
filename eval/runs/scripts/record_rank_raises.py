"""mistake: rank 1's validation metric divides by its number of positive labels, zero in its
shard, and raises ZeroDivisionError while rank 0 waits in the all-reduce of the metrics; main is
wrapped in torch.distributed.elastic's @record, as the torchrun docs advise.
label: D20
first_rank: 1
launch: torchrun --nproc-per-node 2 eval/runs/scripts/record_rank_raises.py
source: none known
"""

from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record


def precision(preds, labels):
    positives = int(labels.sum())
    return float((preds * labels).sum()) / positives


@record
def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=20))
    rank = dist.get_rank()
    labels = torch.zeros(32) if rank == 1 else (torch.rand(32) > 0.5).float()
    preds = (torch.rand(32) > 0.5).float()
    metric = torch.tensor([precision(preds, labels)])
    dist.all_reduce(metric)
    print("precision", metric.item() / dist.get_world_size())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
