"""mistake: the evaluation helper, decorated with torch.distributed.elastic's `@record`, looks up
each batch's class names in a mapping built from the rank's own shard; rank 1's shard has a class
the mapping lacks and raises KeyError, while rank 0 waits in the all_reduce of the eval loss.
Launched with `python -m torch.distributed.run`.
label: D20
first_rank: 1
launch: python -m torch.distributed.run --nproc-per-node 2 eval/runs/scripts/record_eval_helper_rank1.py
source: none known
written: session 12c, unseen
"""

from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

CLASSES = {"cat": 0, "dog": 1, "bird": 2}


def shard(rank):
    names = ["cat", "dog", "bird", "dog"]
    if rank == 1:
        names[2] = "horse"
    return names


@record
def evaluate(rank):
    total = torch.zeros(1)
    for name in shard(rank):
        idx = CLASSES[name]
        total += idx * 0.1
        dist.all_reduce(total)
    return total.item()


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=15))
    rank = dist.get_rank()
    print(f"[rank {rank}] eval start", flush=True)
    score = evaluate(rank)
    print(f"[rank {rank}] eval score {score:.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
