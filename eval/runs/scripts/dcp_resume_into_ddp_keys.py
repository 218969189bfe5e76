"""mistake: the pretraining run saved its weights with `torch.distributed.checkpoint.save` from the bare
model, and the fine-tuning script loads them with `dcp.load({"model": model.state_dict()})` after
wrapping the model in DDP, so the requested keys carry DDP's `module.` prefix the checkpoint lacks;
every rank fails the load.
label: none
alternates: D15
first_rank: none
launch: rm -rf /tmp/r13b_dcp && torchrun --nproc-per-node 2 eval/runs/scripts/dcp_resume_into_ddp_keys.py pretrain && torchrun --nproc-per-node 2 eval/runs/scripts/dcp_resume_into_ddp_keys.py finetune
source: none known
written: session 13b, unseen
"""

import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

CKPT = "/tmp/r13b_dcp/pretrain"


def build():
    return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16))


def main():
    stage = sys.argv[1]
    dist.init_process_group("gloo")
    model = build()
    if stage == "pretrain":
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(3):
            loss = model(torch.randn(4, 16)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        dcp.save({"model": model.state_dict()}, checkpoint_id=CKPT)
        if dist.get_rank() == 0:
            print("saved pretrain checkpoint")
    else:
        model = DDP(model)
        state = {"model": model.state_dict()}
        dcp.load(state, checkpoint_id=CKPT)
        model.load_state_dict(state["model"])
        if dist.get_rank() == 0:
            print("resumed from pretrain checkpoint")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
