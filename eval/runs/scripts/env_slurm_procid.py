"""mistake: the rank is read from SLURM_PROCID (the script was copied from a SLURM cluster's
`srun python train.py` recipe) and the job is started with torchrun, which sets RANK, not SLURM_*.
label: D1
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/env_slurm_procid.py
source: none known
"""

import os

import torch
import torch.distributed as dist


def setup():
    rank = int(os.environ["SLURM_PROCID"])
    world_size = int(os.environ["SLURM_NTASKS"])
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    return rank, world_size


def main():
    rank, world_size = setup()
    x = torch.ones(4) * rank
    dist.all_reduce(x)
    print(f"rank {rank}/{world_size}: {x.tolist()}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
