"""Stop the epoch after a token budget, counted per rank on variable-length batches.

Hang class: ranks leave the training loop after different numbers of batches (uneven data).
Label: D9
Odd ranks: 1
Launch: torchrun 2

A real DataLoader over a DistributedSampler (drop_last=False: every rank gets the same number of
batches). But each rank counts its own tokens and `break`s at the budget: rank 1's sequences are
longer, so it breaks first and waits in the barrier after the loop while rank 0 is still in
DDP's all-reduce inside `backward()`.
"""

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

TOKEN_BUDGET = 4_000


class Sequences(Dataset):
    def __init__(self, n: int) -> None:
        self.lengths = [8 + 56 * (i % 2) for i in range(n)]

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.randint(0, 100, (self.lengths[i],))


def collate(batch: list[torch.Tensor]) -> torch.Tensor:
    return nn.utils.rnn.pad_sequence(batch, batch_first=True)


def main() -> None:
    dist.init_process_group("gloo")
    dataset = Sequences(1_000)
    sampler = DistributedSampler(dataset, shuffle=False, drop_last=False)
    loader = DataLoader(dataset, batch_size=8, sampler=sampler, collate_fn=collate)
    model = DDP(nn.Sequential(nn.Embedding(100, 16), nn.Linear(16, 1)))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        tokens = 0
        for tokens_batch in loader:
            loss = model(tokens_batch).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            tokens += tokens_batch.numel()
            if tokens >= TOKEN_BUDGET:
                break
        dist.barrier()
        if dist.get_rank() == 0:
            print(f"epoch {epoch} done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
