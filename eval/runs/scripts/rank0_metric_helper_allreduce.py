"""mistake: logging is done on the main process only (`if rank == 0: log_metrics(...)`), and the
metrics helper averages the loss across ranks with all_reduce inside; the other ranks never call
it and go on to the final barrier (init timeout 5 s).
label: D21
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/rank0_metric_helper_allreduce.py
source: none known
"""

from datetime import timedelta

import torch
import torch.distributed as dist


def reduce_mean(value):
    t = torch.tensor([value])
    dist.all_reduce(t)
    return t.item() / dist.get_world_size()


def log_metrics(step, loss):
    print(f"step {step}: mean loss {reduce_mean(loss):.4f}", flush=True)


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=5))
    rank = dist.get_rank()
    loss = 1.0 / (rank + 1)
    if rank == 0:
        log_metrics(0, loss)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
