# source: https://github.com/allenai/allennlp/issues/3841
# established: each distributed worker built its own tensorboard SummaryWriter on the shared run
#   directory and the directory creation raced into FileExistsError.
# expect: TRG023
# (a minimal reconstruction of the pattern)
import os

import torch.distributed as dist
from torch.utils.tensorboard import SummaryWriter


def train_worker(process_rank, serialization_dir, world_size):
    dist.init_process_group("nccl", rank=process_rank, world_size=world_size)
    train_log = SummaryWriter(os.path.join(serialization_dir, "log", "train"))
    validation_log = SummaryWriter(os.path.join(serialization_dir, "log", "validation"))
    return train_log, validation_log
