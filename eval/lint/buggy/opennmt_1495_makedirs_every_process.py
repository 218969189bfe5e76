# source: https://github.com/OpenNMT/OpenNMT-py/issues/1495
# established: every training process created the model directory at start-up, so multi-GPU runs
#   failed with FileExistsError.
# expect: TRG023
# (a minimal reconstruction of the pattern)
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def single_main(device_id, opt):
    dist.init_process_group("nccl", init_method=opt.master, world_size=opt.world_size, rank=device_id)
    torch.cuda.set_device(device_id)
    model_dirname = os.path.dirname(os.path.abspath(opt.save_model))
    if not os.path.exists(model_dirname):
        os.makedirs(model_dirname)


def main(opt):
    mp.spawn(single_main, args=(opt,), nprocs=opt.world_size)
