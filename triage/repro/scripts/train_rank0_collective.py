"""D21 / D19: an all-reduce only rank 0 calls (it logs a metric), then a barrier on every rank.

Run plainly, both ranks time out in different collectives (D21). Run with
TORCH_DISTRIBUTED_DEBUG=DETAIL, torch names the mismatch (D19's toolkit).
"""

import datetime

import torch
import torch.distributed as dist


def main() -> None:
    """Run this reproduction as one rank of the job."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=5))
    rank = dist.get_rank()
    for step in range(3):
        grads = torch.ones(4) * rank
        dist.all_reduce(grads)
        print(f"rank {rank} step {step} ok", flush=True)
    metric = torch.tensor([float(rank)])
    if rank == 0:
        dist.all_reduce(metric)  # the collective hides inside a rank-0-only logging branch
        print(f"validation metric {metric.item()}", flush=True)
    dist.barrier()
    print(f"rank {rank} finished", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
