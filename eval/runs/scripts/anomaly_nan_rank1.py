"""mistake: rank 1's batch holds a zero where the loss takes a log; with
torch.autograd.set_detect_anomaly(True) on, rank 1's backward raises on the NaN while rank 0 waits
for its gradients in DDP's all-reduce.
label: D20
first_rank: 1
launch: torchrun --nproc-per-node 2 eval/runs/scripts/anomaly_nan_rank1.py
written: after the log engine was read (session 8, second batch)
source: none known
"""

import torch
import torch.distributed as dist
import torch.nn as nn


def main():
    torch.autograd.set_detect_anomaly(True)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = nn.parallel.DistributedDataParallel(nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(4):
        x = torch.rand(8, 4) + 0.1
        scale = torch.zeros(1) if (rank == 1 and step == 2) else torch.ones(1)
        loss = -torch.log(torch.sigmoid(model(x)).mean() * scale)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"[rank {rank}] step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
