# source: https://github.com/meta-llama/llama-cookbook/issues/90
# established: torch.cuda.set_device(rank) must use local_rank; on nodes after the first it fails
#   with "invalid device ordinal" (the reporter's change fixed multi-node fine-tuning).
# expect: TRG003
# (a minimal reconstruction of the pattern)
import os

import torch
import torch.distributed as dist


def main(model):
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    rank = int(os.environ["RANK"])
    torch.cuda.set_device(rank)
    model.to(local_rank)


if __name__ == "__main__":
    main(None)
