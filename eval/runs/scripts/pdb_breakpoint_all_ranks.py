"""mistake: the user puts `breakpoint()` in the training step to inspect a batch and runs the job
under torchrun as usual; every rank enters pdb at once on a stdin it does not own, the prompts
interleave and the debugger quits at once with BdbQuit.
label: P8
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/pdb_breakpoint_all_ranks.py
source: none known
written: session 9b, unseen
"""

import torch
import torch.distributed as dist
import torch.nn as nn


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = nn.Linear(4, 2)
    for step in range(3):
        batch = torch.randn(8, 4)
        if step == 1:
            breakpoint()  # look at the batch
        loss = model(batch).pow(2).mean()
        loss.backward()
        print(f"rank {rank} step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
