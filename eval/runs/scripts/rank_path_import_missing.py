"""mistake: the augmentation plugins are imported from a per-node directory put on sys.path
(one directory per node in the copied cluster recipe); rank 1's directory lacks the
module, so rank 1 dies with ModuleNotFoundError after joining the group while rank 0 waits in the
first all-reduce.
label: D20
first_rank: 1
launch: torchrun --nproc-per-node 2 eval/runs/scripts/rank_path_import_missing.py
source: none known
written: session 9, unseen
"""

import importlib
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.nn as nn


def plugin_dir(rank):
    root = os.path.join(tempfile.gettempdir(), "r9_plugins", f"node{rank}")
    os.makedirs(root, exist_ok=True)
    if rank == 0:
        with open(os.path.join(root, "fancy_aug.py"), "w") as f:
            f.write("def augment(x):\n    return x + 0.01\n")
    return root


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    sys.path.insert(0, plugin_dir(rank))
    model = nn.parallel.DistributedDataParallel(nn.Linear(8, 1))
    aug = importlib.import_module("fancy_aug")
    x = aug.augment(torch.randn(4, 8))
    model(x).sum().backward()
    print(f"rank {rank} step done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
