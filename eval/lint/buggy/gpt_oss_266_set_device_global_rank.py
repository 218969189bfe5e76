# source: https://github.com/openai/gpt-oss/issues/266
# established: init_distributed binds cuda:RANK; under multi-node torchrun RANK is global, so node 2
#   asks for cuda:4 on a 4-GPU host (fix in the linked PR: LOCAL_RANK for the device).
# expect: TRG003
# (a minimal reconstruction of the pattern)
import os

import torch
import torch.distributed as dist


def init_distributed():
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    rank = int(os.environ.get("RANK", 0))
    dist.init_process_group(backend="nccl", init_method="env://", world_size=world_size, rank=rank)
    torch.cuda.set_device(rank)
    device = torch.device(f"cuda:{rank}")
    return device
