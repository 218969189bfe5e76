"""mistake: only the classifier head is fine-tuned, so the optimizer is built from
`model.module.head.parameters()` after the model was wrapped whole in FSDP (FSDP1, CPU/gloo,
default use_orig_params=False); FSDP has replaced the head's parameters by views of one
FlatParameter, so the head has no parameters left and the optimizer gets an empty list on every rank.
label: E15
alternates: none
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/fsdp_optim_subset_flat.py
source: none known
written: session 11b, unseen
"""

from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32))
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        return self.head(self.backbone(x))


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=15))
    model = FSDP(Net(), device_id=torch.device("cpu"))
    opt = torch.optim.AdamW(model.module.head.parameters(), lr=1e-3)
    for step in range(3):
        loss = model(torch.randn(8, 16)).logsumexp(-1).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"rank {dist.get_rank()} step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
