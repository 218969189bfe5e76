"""mistake: a sanity check after porting to multiple processes: rank 0 asserts that the loss summed
over the ranks' shards with all_reduce is exactly equal (torch.equal) to the loss it computes over
the whole batch on its own; float32 addition in a different order differs in the last bits, so the
assertion fails although nothing is wrong. Started with mp.spawn.
label: P9
first_rank: 0
launch: python eval/runs/scripts/allreduce_sum_exact_assert.py
source: none known
written: session 9b, unseen
"""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, world_size):
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    gen = torch.Generator().manual_seed(7)
    data = torch.randn(40001, generator=gen) * torch.exp(4 * torch.randn(40001, generator=gen))
    shard = data[rank::world_size]
    total = shard.sum()
    dist.all_reduce(total)
    if rank == 0:
        reference = data.sum()
        print(f"distributed {total.item()!r} single {reference.item()!r}", flush=True)
        assert torch.equal(total, reference), "all_reduce result differs from single-process sum"
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29511")
    mp.spawn(worker, args=(2,), nprocs=2)
