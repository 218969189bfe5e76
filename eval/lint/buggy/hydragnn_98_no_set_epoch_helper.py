# source: https://github.com/ORNL/HydraGNN/pull/98
# established (merged, labelled bug): the samplers built by the data-loading helper never had
#   set_epoch called, so every epoch used the same sampling order; the fix calls it for each sampler
#   at the start of every epoch.
# expect: TRG022
# (a minimal reconstruction of the pattern)
import torch.distributed as dist
from torch.utils.data.distributed import DistributedSampler
from torch_geometric.loader import DataLoader


def create_dataloaders(trainset, valset, testset, batch_size):
    train_sampler = DistributedSampler(trainset)
    val_sampler = DistributedSampler(valset)
    test_sampler = DistributedSampler(testset)
    train_loader = DataLoader(trainset, batch_size=batch_size, shuffle=False, sampler=train_sampler)
    val_loader = DataLoader(valset, batch_size=batch_size, shuffle=False, sampler=val_sampler)
    test_loader = DataLoader(testset, batch_size=batch_size, shuffle=False, sampler=test_sampler)
    return train_loader, val_loader, test_loader


def train_validate_test(model, optimizer, datasets, config):
    dist.init_process_group("nccl")
    train_loader, val_loader, test_loader = create_dataloaders(*datasets, config["batch_size"])
    for epoch in range(config["num_epoch"]):
        for data in train_loader:
            optimizer.zero_grad()
            loss = model(data)
            loss.backward()
            optimizer.step()


if __name__ == "__main__":
    train_validate_test(None, None, (None, None, None), {"batch_size": 8, "num_epoch": 2})
