"""mistake: the pretrained checkpoint was saved with the run's argparse Namespace inside
(`{"model": ..., "args": args}`), and is loaded with a plain `torch.load(path)`: since torch 2.6
torch.load defaults to weights_only=True, so every rank refuses to unpickle the Namespace.
label: none
first_rank: none
launch: torchrun --tee 3 --nproc-per-node 2 eval/runs/scripts/load_weights_only_namespace.py
source: https://github.com/pytorch/pytorch/issues/137837
written: session 9, unseen
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn

CKPT = "/tmp/r9_pretrained.pt"


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if rank == 0 and not os.path.exists(CKPT):
        args = argparse.Namespace(lr=3e-4, epochs=10, arch="mlp")
        torch.save({"model": nn.Linear(16, 4).state_dict(), "args": args}, CKPT)
    dist.barrier()
    model = nn.Linear(16, 4)
    state = torch.load(CKPT, map_location="cpu")
    model.load_state_dict(state["model"])
    model = nn.parallel.DistributedDataParallel(model)
    print(f"rank {rank} resumed, lr {state['args'].lr}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
