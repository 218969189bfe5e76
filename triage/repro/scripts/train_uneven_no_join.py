"""D9 without Join: rank 1's shard holds fewer batches, so it finishes the epoch and leaves while
rank 0 is still in the gradient all-reduce of its extra batch; gloo reports the lost peer."""

import datetime

import torch
import torch.distributed as dist


def main() -> None:
    """Run this reproduction as one rank of the job."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank = dist.get_rank()
    weights = torch.zeros(8)
    batches = 5 if rank == 0 else 4  # an unevenly split dataset, no DistributedSampler padding
    for step in range(batches):
        grad = torch.randn(8)
        dist.all_reduce(grad)  # what DDP does in backward()
        weights -= 0.1 * grad / dist.get_world_size()
        print(f"rank {rank} step {step}", flush=True)
    print(f"rank {rank} finished the epoch", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
