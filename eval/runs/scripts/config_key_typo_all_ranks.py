"""mistake: an ordinary bug: the optimizer is built from `config["learning_rate"]` but the YAML-style
config names it `lr`; every rank raises the same KeyError right after joining the group. Nothing
distributed is wrong.
label: none
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/config_key_typo_all_ranks.py
source: none known
written: session 11c, unseen
"""

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

CONFIG = {"model": {"hidden": 32, "layers": 2}, "train": {"lr": 3e-4, "epochs": 2, "batch_size": 16}}


def build_optimizer(model, config):
    return torch.optim.AdamW(model.parameters(), lr=config["train"]["learning_rate"], weight_decay=0.01)


def main():
    dist.init_process_group("gloo")
    hidden = CONFIG["model"]["hidden"]
    model = DDP(nn.Sequential(nn.Linear(16, hidden), nn.GELU(), nn.Linear(hidden, 4)))
    optimizer = build_optimizer(model, CONFIG)
    for epoch in range(CONFIG["train"]["epochs"]):
        loss = model(torch.randn(CONFIG["train"]["batch_size"], 16)).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
