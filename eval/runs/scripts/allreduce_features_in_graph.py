"""mistake: for a "global" contrastive loss, the normalised features are summed across ranks with
`dist.all_reduce(feats)` in the middle of the forward (instead of an autograd-aware gather); the
collective has no autograd formula, so backward runs through it as if it were the identity and the
gradients are silently wrong. Nothing fails: torch only warns (the first draft expected an in-place
error in backward; torch 2.13 warns instead). Started with mp.spawn.
label: none
first_rank: none
launch: python eval/runs/scripts/allreduce_features_in_graph.py
source: none known
written: session 10b, unseen
"""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn


def worker(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29534")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    encoder = nn.Linear(12, 6)
    opt = torch.optim.SGD(encoder.parameters(), lr=0.1)
    for step in range(2):
        x = torch.randn(8, 12)
        feats = nn.functional.normalize(encoder(x), dim=1)
        dist.all_reduce(feats)
        feats = feats / world_size
        logits = feats @ feats.t()
        loss = nn.functional.cross_entropy(logits, torch.arange(8))
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"rank {rank} step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(2,), nprocs=2)
