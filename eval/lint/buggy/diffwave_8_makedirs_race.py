# source: https://github.com/albertfgu/diffwave-sashimi/issues/8
# established: `if not os.path.isdir(d): os.makedirs(d)` in every spawned process regularly raised
#   FileExistsError; exist_ok=True fixed it (confirmed by the reporter).
# expect: TRG023
# (a minimal reconstruction of the pattern)
import os

import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, world_size, output_directory):
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    if not os.path.isdir(output_directory):
        os.makedirs(output_directory)
        os.chmod(output_directory, 0o775)


if __name__ == "__main__":
    mp.spawn(worker, args=(2, "exp"), nprocs=2)
