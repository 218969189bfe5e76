"""mistake: the launch notes say "master at 127.0.0.1:PORT", and the user pasted that whole string into
MASTER_ADDR (`MASTER_ADDR=127.0.0.1:29500`) when starting one `python` per rank with env://; the store
host is then "127.0.0.1:PORT", a name that does not resolve, and both ranks wait in init until the
20 s timeout.
label: E13
alternates: P1
first_rank: none
launch: MASTER_ADDR=127.0.0.1:$MASTER_PORT RANK=0 WORLD_SIZE=2 python eval/runs/scripts/master_addr_with_port.py & MASTER_ADDR=127.0.0.1:$MASTER_PORT RANK=1 WORLD_SIZE=2 python eval/runs/scripts/master_addr_with_port.py; wait
source: none known
written: session 13b, unseen
"""

from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("gloo", init_method="env://", timeout=timedelta(seconds=20))
    rank = dist.get_rank()
    model = DDP(nn.Linear(16, 4))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(10):
        loss = model(torch.randn(8, 16)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    if rank == 0:
        print(f"done, loss {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
