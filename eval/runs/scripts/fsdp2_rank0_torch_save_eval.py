"""mistake: a model sharded with FSDP2's `fully_shard` is checkpointed like a DDP one, `if rank == 0:
torch.save(model.state_dict(), path)`; its state dict holds DTensors (rank 0's shards only), and the
evaluation script, run afterwards with plain `python` into an unsharded model, cannot load the file.
label: D15
alternates: E6
first_rank: none
launch: rm -rf /tmp/r13_fsdp2 && torchrun --nproc-per-node 2 eval/runs/scripts/fsdp2_rank0_torch_save_eval.py train && python eval/runs/scripts/fsdp2_rank0_torch_save_eval.py eval
source: none known
written: session 13, unseen
"""

import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import fully_shard

CKPT = "/tmp/r13_fsdp2/model.pt"


def build():
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))


def train():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = build()
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(3):
        loss = model(torch.randn(8, 16)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
    if rank == 0:
        os.makedirs(os.path.dirname(CKPT), exist_ok=True)
        torch.save(model.state_dict(), CKPT)
        print(f"saved {CKPT}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


def evaluate():
    model = build()
    model.load_state_dict(torch.load(CKPT))
    model.eval()
    with torch.no_grad():
        print("eval output", model(torch.randn(2, 16)).shape)


if __name__ == "__main__":
    train() if sys.argv[1] == "train" else evaluate()
