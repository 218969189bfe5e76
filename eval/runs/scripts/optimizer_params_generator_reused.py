"""mistake: the script counts the model's parameters by iterating `params = model.parameters()`
and then passes the same, now exhausted, generator to the optimizer: "optimizer got an empty
parameter list" on every rank (one `python` per rank, env://).
label: none
first_rank: none
launch: MASTER_ADDR=127.0.0.1 WORLD_SIZE=2 RANK=0 python eval/runs/scripts/optimizer_params_generator_reused.py & sleep 0.5; MASTER_ADDR=127.0.0.1 WORLD_SIZE=2 RANK=1 python eval/runs/scripts/optimizer_params_generator_reused.py; wait
source: none known
written: session 12c, unseen
"""

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = DDP(nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 2)))
    params = model.parameters()
    n = sum(p.numel() for p in params)
    if rank == 0:
        print(f"model has {n} parameters", flush=True)
    opt = torch.optim.AdamW(params, lr=3e-4)
    x = torch.randn(4, 10)
    loss = model(x).sum()
    loss.backward()
    opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
