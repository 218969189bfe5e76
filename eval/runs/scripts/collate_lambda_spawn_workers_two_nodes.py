"""mistake: the DataLoader uses `multiprocessing_context="spawn"` (copied from a fix for a fork
problem) with `collate_fn=lambda b: ...`; the spawn-started workers cannot pickle the lambda, on
every rank of two c10d "nodes".
label: E14
first_rank: none
launch: torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$MASTER_PORT --rdzv-id job12b eval/runs/scripts/collate_lambda_spawn_workers_two_nodes.py & sleep 1; torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$MASTER_PORT --rdzv-id job12b eval/runs/scripts/collate_lambda_spawn_workers_two_nodes.py; wait
source: https://github.com/pytorch/pytorch/issues/13246
written: session 12b, unseen
"""

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main():
    dist.init_process_group("gloo")
    ds = TensorDataset(torch.randn(64, 6), torch.randn(64, 1))
    loader = DataLoader(
        ds,
        batch_size=8,
        sampler=DistributedSampler(ds),
        num_workers=2,
        multiprocessing_context="spawn",
        collate_fn=lambda batch: tuple(torch.stack(t) for t in zip(*batch)),
    )
    model = DDP(nn.Linear(6, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        loss = (model(x) - y).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
