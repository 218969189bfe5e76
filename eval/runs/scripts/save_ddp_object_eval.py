"""mistake: the training script saves the whole DDP-wrapped model object (`torch.save(model, ...)`,
not `model.module.state_dict()`), and the evaluation script, run later with plain `python` on one
process, loads it with `weights_only=False`; unpickling the DistributedDataParallel wrapper needs
the default process group, which the evaluation process never initialised.
label: E4
alternates: none
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/save_ddp_object_eval.py --train && python eval/runs/scripts/save_ddp_object_eval.py --eval
source: none known
written: session 11b, unseen
"""

import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

CKPT = "/tmp/r11b_ddp_model.pt"


def train():
    dist.init_process_group("gloo")
    model = DDP(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        loss = model(torch.randn(4, 8)).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
    if dist.get_rank() == 0:
        torch.save(model, CKPT)
        print(f"saved model to {CKPT}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


def evaluate():
    model = torch.load(CKPT, weights_only=False)
    model.eval()
    with torch.no_grad():
        print("eval output:", model(torch.randn(2, 8)))


if __name__ == "__main__":
    train() if "--train" in sys.argv else evaluate()
