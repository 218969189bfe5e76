"""mistake: the checkpoint saved with torch.distributed.checkpoint (DCP) on 2 processes holds the
per-rank RNG seeds stacked into one tensor of shape [world_size]; the job is resumed on 3
processes, and DCP's load into the freshly built state (a tensor of shape [3]) refuses the saved
shape [2]. The model weights would have resharded; the per-rank state does not.
label: D15
first_rank: none
launch: rm -rf /tmp/s12_dcp && torchrun --nproc-per-node 2 eval/runs/scripts/dcp_resume_world_change.py save && torchrun --nproc-per-node 3 eval/runs/scripts/dcp_resume_world_change.py resume
source: https://github.com/pytorch/pytorch/issues/121227
written: session 12, unseen
"""

import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn

CKPT = "/tmp/s12_dcp/step_100"


def state(model, world):
    return {
        "model": model.state_dict(),
        "rng_seeds": torch.zeros(world, dtype=torch.int64),
        "step": torch.tensor(0),
    }


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model = nn.Linear(8, 8)
    sd = state(model, world)
    if sys.argv[1] == "save":
        sd["rng_seeds"] = torch.arange(world, dtype=torch.int64) + 1234
        sd["step"] = torch.tensor(100)
        dcp.save(sd, checkpoint_id=CKPT)
        if rank == 0:
            print(f"saved {CKPT} on {world} ranks", flush=True)
    else:
        dcp.load(sd, checkpoint_id=CKPT)
        torch.manual_seed(int(sd["rng_seeds"][rank]))
        print(f"rank {rank}: resumed at step {int(sd['step'])}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
