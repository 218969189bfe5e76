"""mistake: the DistributedSampler is built with `num_replicas=2, rank=rank` (written for the
2-GPU workstation) and the job is now launched with 4 processes; ranks 2 and 3 raise when their
sampler is built. Output collected with `--tee 3`.
label: none
alternates: D22
first_rank: none
launch: torchrun --tee 3 --nproc-per-node 4 eval/runs/scripts/sampler_num_replicas_fixed.py
source: none known
written: session 10, unseen
"""

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

NUM_GPUS = 2


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    ds = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
    sampler = DistributedSampler(ds, num_replicas=NUM_GPUS, rank=rank)
    loader = DataLoader(ds, batch_size=8, sampler=sampler)
    print(f"rank {rank}: {len(loader)} batches", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
