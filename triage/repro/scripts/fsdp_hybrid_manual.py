"""D13: a job moving to several nodes switches FSDP1's sharding strategy from FULL_SHARD to
HYBRID_SHARD (shard within a node, replicate across nodes) but keeps wrapping the model by hand,
with no auto_wrap_policy, process group or device mesh: FSDP cannot know which ranks share a node."""

import datetime

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel, ShardingStrategy


def main() -> None:
    """Run this reproduction as one rank of the job."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    sharded = FullyShardedDataParallel(
        model, device_id=torch.device("cpu"), sharding_strategy=ShardingStrategy.HYBRID_SHARD
    )
    loss = sharded(torch.randn(4, 8)).pow(2).mean()
    loss.backward()
    print(f"rank {dist.get_rank()} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
