# source: https://github.com/LMCache/LMCache/issues/814
# established: the device id was the global rank; past the GPUs of one node it is an invalid
#   ordinal (maintainer: use local_rank instead).
# expect: TRG003
# (a minimal reconstruction of the pattern)
import torch
import torch.distributed as dist


def setup(tp_world_size):
    dist.init_process_group("nccl")
    global_rank = dist.get_rank()
    device_id = global_rank
    torch.cuda.set_device(device_id)
    return torch.device("cuda", device_id)
