"""mistake: checkpoints are saved with torch.distributed.checkpoint under `checkpoint_{step}` but the resume
code builds the path as `checkpoint-{step}` (the Hugging Face naming), so `dcp.load` finds no metadata in a
directory that does not exist, on every rank. Saved in one torchrun, resumed in a second.
label: none
first_rank: none
launch: rm -rf /tmp/r13_dcp && torchrun --nproc-per-node 2 eval/runs/scripts/dcp_resume_dir_name_typo.py save && torchrun --nproc-per-node 2 eval/runs/scripts/dcp_resume_dir_name_typo.py resume
source: none known
written: session 13, unseen
"""

import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn

OUT = "/tmp/r13_dcp"


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = nn.Linear(8, 8)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    state = {"model": model.state_dict(), "step": torch.tensor(0)}
    if sys.argv[1] == "save":
        model(torch.randn(2, 8)).sum().backward()
        opt.step()
        state = {"model": model.state_dict(), "step": torch.tensor(200)}
        dcp.save(state, checkpoint_id=f"{OUT}/checkpoint_200")
        if rank == 0:
            print(f"saved {OUT}/checkpoint_200", flush=True)
    else:
        resume_step = 200
        dcp.load(state, checkpoint_id=f"{OUT}/checkpoint-{resume_step}")
        model.load_state_dict(state["model"])
        print(f"rank {rank}: resumed from step {int(state['step'])}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
