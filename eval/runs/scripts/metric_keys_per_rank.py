"""mistake: per-class validation counts are averaged by stacking the rank's metrics dict into one
tensor and all-reducing it; the dict only holds the classes seen in that rank's shard, so rank 1
(which saw one class more) all-reduces a longer tensor.
label: D19
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/metric_keys_per_rank.py
source: none known
written: session 9, unseen
"""

import torch
import torch.distributed as dist


def per_class_counts(labels):
    counts = {}
    for y in labels:
        counts[y] = counts.get(y, 0) + 1
    return counts


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    labels = [0, 1, 1, 2] if rank == 0 else [0, 1, 2, 3, 3]
    counts = per_class_counts(labels)
    t = torch.tensor([counts[k] for k in sorted(counts)], dtype=torch.float32)
    dist.all_reduce(t)
    print(f"rank {rank} class counts {t.tolist()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
