# source: https://github.com/NVIDIA/apex/issues/886
# established: saving when local_rank == 0 has one process per node write the same path, which
#   corrupts the checkpoint when there is more than one node.
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


def main(model, loader, optimizer, epochs):
    for epoch in range(epochs):
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if args.local_rank == 0:
            torch.save({"epoch": epoch + 1, "state_dict": model.state_dict()}, "checkpoint.pth.tar")


main(None, [], None, 1)
