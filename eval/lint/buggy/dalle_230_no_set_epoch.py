# source: https://github.com/lucidrains/DALLE-pytorch/pull/230
# established (merged fix): the data sampler's set_epoch was never called, so every epoch had the
#   same order.
# expect: TRG022
# (a minimal reconstruction of the pattern)
import torch.distributed as dist
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


def train(dalle, ds, opt, epochs, batch_size):
    dist.init_process_group("nccl")
    data_sampler = DistributedSampler(ds, num_replicas=dist.get_world_size(), rank=dist.get_rank())
    dl = DataLoader(ds, batch_size=batch_size, shuffle=False, sampler=data_sampler)
    for epoch in range(epochs):
        for text, images in dl:
            loss = dalle(text, images, return_loss=True)
            loss.backward()
            opt.step()
            opt.zero_grad()
