"""mistake: the run config is shared with broadcast_object_list inside `if rank == 0:` (the author
thought the other ranks receive it automatically); the others go straight to the first all-reduce
(init timeout 5 s).
label: D21
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/broadcast_config_rank0_only.py
written: after the log engine was read (session 8, second batch)
source: none known
"""

from datetime import timedelta

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=5))
    rank = dist.get_rank()
    config = [{"lr": 3e-4, "batch_size": 32}] if rank == 0 else [None]
    if rank == 0:
        dist.broadcast_object_list(config, src=0)
    grad = torch.ones(1000)
    dist.all_reduce(grad)
    print(f"rank {rank}: config {config[0]}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
