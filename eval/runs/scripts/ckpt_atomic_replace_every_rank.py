"""mistake: the checkpoint helper writes "atomically", `torch.save(state, path + ".tmp")` then
`os.replace(tmp, path)`, and is called on every rank (the `is_main_process` check was lost in a
refactor); both "nodes" write the same shared directory, and the rank whose replace comes second
finds the temporary file already moved. Two c10d "nodes" on loopback.
label: D23
first_rank: none
launch: rm -rf /tmp/r13b_ckpt && torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$MASTER_PORT --rdzv-id job13bck eval/runs/scripts/ckpt_atomic_replace_every_rank.py & sleep 1; torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$MASTER_PORT --rdzv-id job13bck eval/runs/scripts/ckpt_atomic_replace_every_rank.py; wait
source: none known
written: session 13b, unseen
"""

import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

OUT = "/tmp/r13b_ckpt"


def save_checkpoint(state, path):
    tmp = path + ".tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)


def main():
    dist.init_process_group("gloo")
    os.makedirs(OUT, exist_ok=True)
    model = DDP(nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 512)))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(1, 31):
        loss = model(torch.randn(8, 512)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 10 == 0:
            dist.barrier()
            save_checkpoint(
                {"model": model.module.state_dict(), "optim": opt.state_dict(), "step": step},
                os.path.join(OUT, "last.pt"),
            )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
