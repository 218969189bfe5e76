"""mistake: resuming with torch.distributed.checkpoint after a layer was added to the model: the
state dict asks for keys the checkpoint does not have.
label: D15
alternates: E6
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/dcp_load_new_key.py
source: none known
"""

import os
import shutil
import tempfile

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp


def build(with_adapter):
    layers = [torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)]
    if with_adapter:
        layers.append(torch.nn.Linear(2, 2))
    return torch.nn.Sequential(*layers)


def main():
    dist.init_process_group("gloo")
    ckpt = os.path.join(tempfile.gettempdir(), "runs7_dcp_ckpt")
    if dist.get_rank() == 0:
        shutil.rmtree(ckpt, ignore_errors=True)
    dist.barrier()
    dcp.save({"model": build(False).state_dict()}, checkpoint_id=ckpt)
    model = build(True)
    state = {"model": model.state_dict()}
    dcp.load(state, checkpoint_id=ckpt)
    model.load_state_dict(state["model"])
    print("resumed", dist.get_rank())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
