"""mistake: the evaluation computes per-class accuracy on each rank's shard as
`correct[c] / count[c]` with plain Python numbers before all-reducing the metrics; rank 2's shard
holds no sample of class 3, so it dies with ZeroDivisionError while ranks 0 and 1 wait in the
all-reduce.
label: D20
first_rank: 2
launch: torchrun --nproc-per-node 3 eval/runs/scripts/per_class_acc_empty_rank2.py
source: none known
written: session 12b, unseen
"""

import torch
import torch.distributed as dist


def evaluate(labels, preds, classes=4):
    accs = []
    for c in range(classes):
        count = sum(1 for y in labels if y == c)
        correct = sum(1 for y, p in zip(labels, preds) if y == c and p == c)
        accs.append(correct / count)
    return torch.tensor(accs)


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    labels = [i % 4 for i in range(30)]
    labels = labels[rank::world]
    if rank == 2:
        labels = [y if y != 3 else 0 for y in labels]
    preds = [y if i % 3 else (y + 1) % 4 for i, y in enumerate(labels)]
    acc = evaluate(labels, preds)
    dist.all_reduce(acc)
    acc /= world
    if rank == 0:
        print("per-class accuracy", acc.tolist())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
