"""A checkpoint helper that ends with `dist.barrier()` "so that no rank reads a half-written
file", called from the training loop under `if rank == 0:` as saving usually is.

Hang class: a barrier inside a function only rank 0 calls (rank-conditional collective).
Label: D21
Odd ranks: 0
Launch: python 2
Held out: session 12b

At the first checkpoint (step 50) rank 0 waits in the barrier at the end of `save_checkpoint`;
rank 1 goes on and waits in DDP's gradient all-reduce inside `backward()`.
"""

import os
import tempfile

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def save_checkpoint(model: nn.Module, opt: torch.optim.Optimizer, step: int, out_dir: str) -> None:
    path = os.path.join(out_dir, f"step_{step:06d}.pt")
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, path + ".tmp")
    os.replace(path + ".tmp", path)
    dist.barrier()


def main() -> None:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4)))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    out_dir = os.path.join(tempfile.gettempdir(), f"v_ckpt_{os.environ['MASTER_PORT']}")
    os.makedirs(out_dir, exist_ok=True)
    for step in range(1, 1001):
        x = torch.randn(32, 16)
        loss = nn.functional.cross_entropy(model(x), x[:, :4].argmax(1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0 and step % 50 == 0:
            save_checkpoint(model.module, opt, step, out_dir)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
