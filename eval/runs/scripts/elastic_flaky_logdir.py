"""mistake: the job counts on `torchrun --max-restarts 2` to ride out a flaky data service (rank 1's
first two attempts get a connection reset), with per-rank log files (`--redirects 3 --log-dir`);
the script keeps no checkpoint, so every restart begins the training again at step 0.
label: MN5
first_rank: 1
launch: rm -rf /tmp/r9_elastic_logs && torchrun --max-restarts 2 --redirects 3 --log-dir /tmp/r9_elastic_logs --nproc-per-node 2 eval/runs/scripts/elastic_flaky_logdir.py
source: none known
written: session 9, unseen
"""

import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.elastic.multiprocessing.errors import record


def fetch(rank, step):
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    if rank == 1 and step == 2 and attempt < 2:
        raise ConnectionResetError(104, "Connection reset by peer", "feature-store:8470")
    return torch.randn(8, 4)


@record
def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = nn.parallel.DistributedDataParallel(nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(5):
        loss = model(fetch(rank, step)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"rank {rank} step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
