# source: https://github.com/Emerge-Lab/PufferDrive/pull/468
# established (merged): logger creation in train() was ungated, so under torchrun every rank called
#   wandb.init() and the job made world_size duplicate runs.
# expect: TRG023
# (a minimal reconstruction of the pattern)
import os

import torch
import torch.distributed as dist
import wandb


def train(config, policy, env):
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    run = wandb.init(project=config["project"], group=config["group"], config=config)
    for step in range(config["steps"]):
        loss = policy(env.step())
        run.log({"loss": loss})
