# source: https://github.com/kan-bayashi/ParallelWaveGAN/issues/177
# established (labelled bug, acknowledged): the distributed trainer never calls sampler.set_epoch.
# expect: TRG022
# (a minimal reconstruction of the pattern)
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


def main(dataset, model, optimizer, n_epochs, is_distributed):
    if is_distributed:
        dist.init_process_group("nccl")
    sampler = DistributedSampler(dataset) if is_distributed else None
    loader = DataLoader(dataset, shuffle=(sampler is None), sampler=sampler, batch_size=8)
    for epoch in range(n_epochs):
        for x, y in loader:
            loss = torch.nn.functional.l1_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
