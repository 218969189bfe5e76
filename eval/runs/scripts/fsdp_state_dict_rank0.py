"""mistake: the FSDP (FSDP1, CPU/gloo) checkpoint is taken like a DDP one, `if rank == 0:
torch.save(model.state_dict(), ...)`; under FULL_STATE_DICT the state_dict() call gathers the
shards from every rank (a collective), so rank 0 waits inside it while rank 1 goes on to the next
epoch's first all-gather (init timeout 10 s).
label: D15
alternates: D21
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/fsdp_state_dict_rank0.py
source: none known
written: session 10b, unseen
"""

import os
import tempfile
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import FullStateDictConfig, StateDictType
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=10))
    rank = dist.get_rank()
    model = FSDP(
        nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)), device_id=torch.device("cpu")
    )
    FSDP.set_state_dict_type(
        model, StateDictType.FULL_STATE_DICT, FullStateDictConfig(rank0_only=True)
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    out_dir = tempfile.mkdtemp(prefix="ckpt_")
    for epoch in range(2):
        for step in range(3):
            x = torch.randn(8, 16)
            loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
        print(f"[rank {rank}] epoch {epoch} loss {loss.item():.4f}", flush=True)
        if rank == 0:
            torch.save(model.state_dict(), os.path.join(out_dir, f"epoch{epoch}.pt"))
            print(f"saved epoch {epoch}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
