"""mistake: DistributedSampler(seed=rank) ("a different seed per rank for more randomness"): the
ranks shuffle with different permutations, so their shards overlap and some samples are never
seen. Nothing fails; the script prints each rank's first indices and the overlap.
label: D22
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/sampler_seed_is_rank.py
source: none known
"""

import torch
import torch.distributed as dist
from torch.utils.data import DistributedSampler, TensorDataset


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    ds = TensorDataset(torch.arange(20))
    sampler = DistributedSampler(ds, shuffle=True, seed=rank)
    mine = list(sampler)
    print(f"rank {rank} epoch 0 indices {mine}", flush=True)
    got = [None] * dist.get_world_size()
    dist.all_gather_object(got, mine)
    if rank == 0:
        seen = set().union(*map(set, got))
        overlap = set(got[0]) & set(got[1])
        print(f"unique samples seen {len(seen)}/20, seen twice {sorted(overlap)}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
