# source: https://github.com/jpata/particleflow/pull/233
# established: validation ran only on rank 0 through the DDP-wrapped model, so the job hung at the
#   next barrier; the fix calls model.module() for the rank-0 validation.
# expect: TRG036
# (a minimal reconstruction of the pattern the thread fixed, not the project's code)
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def train(model, train_loader, valid_loader, optimizer, epochs):
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    model = DDP(model.to(local_rank), device_ids=[local_rank])
    for epoch in range(epochs):
        for x, y in train_loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if rank == 0:
            with torch.no_grad():
                for x, y in valid_loader:
                    out = model(x)
        dist.barrier()
