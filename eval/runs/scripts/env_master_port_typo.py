"""mistake: the two ranks are started by hand with env:// from a launch script that exports the rendezvous
variables, and the port line is misspelt (`export MASTER_PROT=...`), so init_process_group finds
MASTER_ADDR, RANK and WORLD_SIZE but no MASTER_PORT.
label: D1
first_rank: none
launch: env -u MASTER_PORT MASTER_PROT=$MASTER_PORT MASTER_ADDR=127.0.0.1 WORLD_SIZE=2 RANK=0 python eval/runs/scripts/env_master_port_typo.py & sleep 0.5; env -u MASTER_PORT MASTER_PROT=$MASTER_PORT MASTER_ADDR=127.0.0.1 WORLD_SIZE=2 RANK=1 python eval/runs/scripts/env_master_port_typo.py; wait
source: none known
written: session 13, unseen
"""

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group(backend="gloo", init_method="env://")
    rank = dist.get_rank()
    model = DDP(nn.Linear(8, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(3):
        loss = model(torch.randn(4, 8)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"[rank {rank}] step {step} loss {loss.item():.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
