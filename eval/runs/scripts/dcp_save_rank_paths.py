"""mistake: the sharded checkpoint is written with torch.distributed.checkpoint, but the path was
built per rank out of habit from per-rank torch.save files (`ckpt/step{N}/rank{R}`), so each rank
passes its own checkpoint_id; the save goes through (every rank writes its shard into its own
directory, and only rank 0's directory gets the `.metadata`), and the resume right after it fails on
rank 1, whose directory has no metadata, while rank 0 waits inside the load's collective.
label: D15
first_rank: 1
launch: rm -rf /tmp/r11_dcp && torchrun --nproc-per-node 2 eval/runs/scripts/dcp_save_rank_paths.py
source: none known
written: session 11, unseen
"""

import os
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

ROOT = "/tmp/r11_dcp"


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=20))
    rank = dist.get_rank()
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        loss = model(torch.randn(8, 16)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    ckpt_dir = os.path.join(ROOT, "step3", f"rank{rank}")
    dcp.save({"model": model.state_dict()}, checkpoint_id=ckpt_dir)
    print(f"[rank {rank}] saved checkpoint to {ckpt_dir}", flush=True)

    # resume (normally in a new job; here right away to check the checkpoint)
    state = {"model": model.state_dict()}
    dcp.load(state, checkpoint_id=ckpt_dir)
    model.load_state_dict(state["model"])
    print(f"[rank {rank}] resumed from {ckpt_dir}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
