"""D19, hanging: rank 1 hits an error, catches it and skips the barrier; rank 0 waits there."""

import datetime
import time

import torch
import torch.distributed as dist


def evaluate(rank: int, step: int) -> None:
    """Evaluate one step; rank 1 fails on step 2."""
    if rank == 1 and step == 2:
        raise ValueError("bad sample in the validation shard")


def main() -> None:
    """Run this reproduction as one rank of the job."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
    rank = dist.get_rank()
    for step in range(1000):
        grads = torch.ones(4)
        dist.all_reduce(grads)  # the suspect stops here: rank 1 went round the loop again
        try:
            evaluate(rank, step)
        except ValueError as exc:
            print(f"rank {rank}: skipping evaluation: {exc}", flush=True)
            continue
        dist.barrier()  # rank 1 skipped this one after its exception
        time.sleep(0.01)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
