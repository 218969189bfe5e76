"""Save the best checkpoint on the main process, then "wait for the save"; the barrier was indented
into the same block as the save.

Hang class: a barrier inside `if rank == 0:` (and a best-so-far test).
Label: D21
Odd ranks: 0
Launch: mp.spawn 2
Held out: session 11d

After epoch 0 the validation loss beats `inf`, so rank 0 saves and waits in `dist.barrier()`;
rank 1 goes on to epoch 1 and waits in DDP's gradient all-reduce inside `backward()`.
"""

import os
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def validate(model: nn.Module) -> float:
    torch.manual_seed(7)
    with torch.no_grad():
        x = torch.randn(64, 10)
        return nn.functional.mse_loss(model(x), x.sum(-1, keepdim=True)).item()


def train(rank: int, world_size: int, ckpt_dir: str) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ.setdefault("MASTER_PORT", "29531")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 1)))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    best = float("inf")
    for epoch in range(50):
        for _ in range(25):
            x = torch.randn(32, 10)
            loss = nn.functional.mse_loss(model(x), x.sum(-1, keepdim=True))
            opt.zero_grad()
            loss.backward()
            opt.step()
        val_loss = validate(model.module)
        if rank == 0 and val_loss < best:
            best = val_loss
            torch.save(model.module.state_dict(), os.path.join(ckpt_dir, "best.pt"))
            print(f"epoch {epoch}: new best {best:.4f}", flush=True)
            dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    world_size = 2
    mp.spawn(train, args=(world_size, tempfile.mkdtemp()), nprocs=world_size, join=True)
