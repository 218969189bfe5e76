"""mistake: the job runs with gloo, but the metrics helper creates its own group with the backend copied
from the GPU recipe, `dist.new_group(backend="nccl")`, on a CPU-only host with the CPU wheel; every rank fails
creating it. Launched with `--redirects 3 --log-dir`, main wrapped in @record.
label: E9
first_rank: none
launch: rm -rf /tmp/r13_nccl_logs && torchrun --redirects 3 --log-dir /tmp/r13_nccl_logs --nproc-per-node 2 eval/runs/scripts/new_group_nccl_metrics.py
source: none known
written: session 13, unseen
"""

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP

_METRICS_GROUP = None


def reduce_metrics(values):
    global _METRICS_GROUP
    if _METRICS_GROUP is None:
        _METRICS_GROUP = dist.new_group(backend="nccl")
    t = torch.tensor(values)
    dist.all_reduce(t, group=_METRICS_GROUP)
    return (t / dist.get_world_size()).tolist()


@record
def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = DDP(nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        loss = model(torch.randn(8, 8)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        metrics = reduce_metrics([loss.item(), 1.0])
        if rank == 0:
            print(f"epoch {epoch} metrics {metrics}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
