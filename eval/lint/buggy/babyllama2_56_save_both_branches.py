# source: https://github.com/DLLXW/baby-llama2-chinese/pull/56
# established (merged): the if/else around torch.save was chosen by `ddp`, not by the rank, so every
#   rank wrote the same file and torch.load then failed ("invalid header or archive is corrupted").
# expect: TRG023
# (a minimal reconstruction of the pattern)
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

ddp = int(os.environ.get("RANK", -1)) != -1
if ddp:
    dist.init_process_group(backend="nccl")
    ddp_local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(ddp_local_rank)


def save(model, save_dir, epoch):
    if ddp:
        torch.save(model.module.state_dict(), f"{save_dir}/epoch_{epoch}.pth")
    else:
        torch.save(model.state_dict(), f"{save_dir}/epoch_{epoch}.pth")


def train(model, loader, optimizer, epochs, save_dir):
    if ddp:
        model = DDP(model, device_ids=[ddp_local_rank])
    for epoch in range(epochs):
        for x, y in loader:
            loss = model(x, y)
            loss.backward()
            optimizer.step()
        save(model, save_dir, epoch)


train(None, [], None, 1, "out")
