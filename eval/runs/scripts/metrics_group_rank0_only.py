"""mistake: a logging helper creates a process group for metric reduction lazily the first time it
is called (`dist.new_group(ranks=[0, 1])`), and only rank 0 calls it (inside `if rank == 0:`);
`new_group` must be called by every rank, so rank 0 waits in it while rank 1 waits in the next
barrier. Two c10d "nodes" on loopback, one process each.
label: D21
first_rank: none
launch: torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$MASTER_PORT --rdzv-id job12c eval/runs/scripts/metrics_group_rank0_only.py & sleep 1; torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$MASTER_PORT --rdzv-id job12c eval/runs/scripts/metrics_group_rank0_only.py; wait
source: none known
written: session 12c, unseen
"""

from datetime import timedelta

import torch
import torch.distributed as dist

_METRIC_GROUP = None


def log_metrics(loss):
    global _METRIC_GROUP
    if _METRIC_GROUP is None:
        _METRIC_GROUP = dist.new_group(ranks=[0, 1])
    t = torch.tensor([loss])
    dist.all_reduce(t, group=_METRIC_GROUP)
    print(f"mean loss {t.item() / 2:.4f}", flush=True)


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=12))
    rank = dist.get_rank()
    for step in range(3):
        loss = 1.0 / (step + 1 + rank)
        if rank == 0:
            log_metrics(loss)
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
