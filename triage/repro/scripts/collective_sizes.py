"""D19 (collectives that do not match): each rank all-reduces a tensor sized by its own data (here
the number of labels it happened to see), so the ranks disagree on the size; gloo aborts the rank
that receives more bytes than it expects, and the other rank's connection is reset."""

import datetime

import torch
import torch.distributed as dist


def main() -> None:
    """Run this reproduction as one rank of the job."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank = dist.get_rank()
    seen_labels = 4 + rank  # each shard of the data holds a different number of classes
    counts = torch.ones(seen_labels)
    dist.all_reduce(counts)
    print(f"rank {rank} label counts {counts.tolist()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
