"""mistake: rank 0 reads the run config and shares it with broadcast_object_list; the small config
class is defined inside the `if rank == 0:` block next to the file parsing (it was only "needed
there"), so the other ranks receive a pickle naming a class their process never defined and fail
to unpickle it.
label: none
alternates: E14
first_rank: 1
launch: torchrun --nproc-per-node 2 eval/runs/scripts/broadcast_object_class_rank0.py
source: none known
written: session 11, unseen
"""

from datetime import timedelta

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=20))
    rank = dist.get_rank()
    if rank == 0:
        global RunConfig

        class RunConfig:
            def __init__(self, lr, epochs):
                self.lr = lr
                self.epochs = epochs

        objs = [RunConfig(lr=3e-4, epochs=2)]
    else:
        objs = [None]
    dist.broadcast_object_list(objs, src=0)
    cfg = objs[0]
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    for epoch in range(cfg.epochs):
        loss = model(torch.randn(8, 4)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"[rank {rank}] epoch {epoch} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
