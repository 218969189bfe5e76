# source: https://github.com/pytorch/tutorials/pull/1861
# established (FSDP maintainers' tutorial review): without auto_wrap_policy all layers are placed in
#   one FSDP unit, with higher peak memory than the auto-wrapped model.
# expect: TRG012
# (a minimal reconstruction of the pattern)
import os

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def fsdp_main(model, loader, epochs):
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    model = FSDP(model.to(local_rank))
    optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)
    for epoch in range(epochs):
        for x, y in loader:
            loss = torch.nn.functional.nll_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
