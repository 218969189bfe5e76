# source: https://github.com/allenai/OLMo/pull/280
# established (merged): the default FSDP policy reduced gradients in bf16; the PR adds reducing them
#   in fp32 (reduce_dtype) as the "mixed" precision option.
# expect: TRG014
# (a minimal reconstruction of the pattern)
import os

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import MixedPrecision
from torch.distributed.fsdp.wrap import size_based_auto_wrap_policy


def build(model):
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    mp = MixedPrecision(param_dtype=torch.bfloat16)
    return FSDP(model, mixed_precision=mp, auto_wrap_policy=size_based_auto_wrap_policy)
