"""D19, hanging: one rank issues its collectives in a different order from the others.

Each rank logs its metrics in the order it first saw them; rank 2 saw them in another order, so it
broadcasts while ranks 0 and 1 all-reduce, and every rank waits for the others.
"""

import datetime

import torch
import torch.distributed as dist


def sync_metrics(metrics: dict[str, torch.Tensor]) -> None:
    """All-reduce each metric, in the order this rank saw them."""
    for name, value in metrics.items():  # insertion order differs between ranks
        if name.startswith("max_"):
            dist.all_reduce(value, op=dist.ReduceOp.MAX)  # ranks 0 and 1 wait here
        else:
            dist.broadcast(value, src=0)  # the suspect stops here


def main() -> None:
    """Run this reproduction as one rank of the job."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
    rank = dist.get_rank()
    seen = ["max_grad_norm", "lr"] if rank != 2 else ["lr", "max_grad_norm"]
    metrics = {name: torch.ones(1) * rank for name in seen}
    sync_metrics(metrics)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
