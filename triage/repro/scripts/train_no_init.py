"""E4: a training script launched with torchrun builds its DistributedSampler (and would wrap the
model in DDP) but never calls init_process_group: every rank stops at the sampler."""

import torch
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main() -> None:
    """Run this reproduction as one rank of the job."""
    dataset = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    # the launcher set RANK and WORLD_SIZE, but no process group exists to read them from
    sampler: DistributedSampler[tuple[torch.Tensor, ...]] = DistributedSampler(dataset, shuffle=True)
    loader = DataLoader(dataset, batch_size=8, sampler=sampler)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
    for x, y in loader:
        torch.nn.functional.mse_loss(model(x), y).backward()  # type: ignore[no-untyped-call]


if __name__ == "__main__":
    main()
