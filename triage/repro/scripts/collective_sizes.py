"""D19 (collectives that do not match): each rank passes a collective a tensor sized by its own
data, so the ranks disagree on the size. Which collective comes from TRIAGE_REPRO_HOW:

- `reduce` (the default): an all-reduce of the label counts, one slot per label the rank's shard
  happened to see; gloo aborts the rank that receives more bytes than it expects, and the other
  rank's connection is reset;
- `gather`: an all-gather of the evaluation predictions, as many as the rank's last batch held,
  into buffers sized like the rank's own.
"""

import datetime
import os

import torch
import torch.distributed as dist


def main() -> None:
    """Run this reproduction as one rank of the job."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank = dist.get_rank()
    if os.environ.get("TRIAGE_REPRO_HOW", "reduce") == "gather":
        predictions = torch.ones(16 + 3 * rank)  # the last evaluation batch is shorter on rank 0
        gathered = [torch.empty_like(predictions) for _ in range(dist.get_world_size())]
        dist.all_gather(gathered, predictions)
        print(f"rank {rank} gathered {sum(len(p) for p in gathered)} predictions", flush=True)
    else:
        seen_labels = 4 + rank  # each shard of the data holds a different number of classes
        counts = torch.ones(seen_labels)
        dist.all_reduce(counts)
        print(f"rank {rank} label counts {counts.tolist()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
