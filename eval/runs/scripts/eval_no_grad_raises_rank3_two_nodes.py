"""mistake: training runs fine, but the evaluation set of rank 3 (the second worker of the second "node")
holds a record with 12 features instead of 16 (a stale export), so rank 3 raises inside its
`with torch.no_grad():` evaluation loop while ranks 0, 1 and 2 wait in the all-reduce of the evaluation
metrics. Two c10d "nodes" on loopback, two processes each.
label: D20
first_rank: 3
launch: torchrun --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$MASTER_PORT --rdzv-id job13ev eval/runs/scripts/eval_no_grad_raises_rank3_two_nodes.py & sleep 1; torchrun --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$MASTER_PORT --rdzv-id job13ev eval/runs/scripts/eval_no_grad_raises_rank3_two_nodes.py; wait
source: none known
written: session 13, unseen
"""

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def eval_records(rank):
    records = [torch.randn(16) for _ in range(6)]
    if rank == 3:
        records[4] = torch.randn(12)
    return records


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = DDP(nn.Sequential(nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 2)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        loss = model(torch.randn(8, 16)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    total, correct = 0, 0
    with torch.no_grad():
        for rec in eval_records(rank):
            pred = model.module(rec.unsqueeze(0)).argmax(-1)
            correct += int(pred.item() == 1)
            total += 1
    stats = torch.tensor([correct, total], dtype=torch.float)
    dist.all_reduce(stats)
    if rank == 0:
        print(f"eval accuracy {stats[0] / stats[1]:.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
