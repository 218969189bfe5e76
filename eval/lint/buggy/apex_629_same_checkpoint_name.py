# source: https://github.com/NVIDIA/apex/issues/629
# established: both processes of a torch.distributed.launch run saved a checkpoint under the same
#   file name, and some checkpoints could not be loaded ("storage has wrong size").
# expect: TRG023
# (a minimal reconstruction of the pattern)
import argparse

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, default=0)
args = parser.parse_args()
torch.cuda.set_device(args.local_rank)
dist.init_process_group(backend="nccl", init_method="env://")


def train(model, loader, optimizer, epochs):
    for epoch in range(epochs):
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        torch.save({"model": model.state_dict(), "epoch": epoch}, "checkpoint.pth")


train(None, [], None, 1)
