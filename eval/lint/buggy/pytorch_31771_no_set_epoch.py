# source: https://github.com/pytorch/pytorch/issues/31771
# established: DistributedSampler(shuffle=True) without set_epoch yields the same order every epoch
#   (closed: set_epoch must be called each epoch).
# expect: TRG022
# (a minimal reconstruction of the report's script)
import torch
from torch.utils.data import DataLoader


def main(dataset):
    torch.distributed.init_process_group(backend="nccl")
    sampler = torch.utils.data.distributed.DistributedSampler(dataset, shuffle=True)
    loader = DataLoader(dataset, batch_size=5, pin_memory=True, drop_last=True, sampler=sampler)
    for epoch in range(3):
        for names, data in loader:
            pass


if __name__ == "__main__":
    main(list(range(22)))
