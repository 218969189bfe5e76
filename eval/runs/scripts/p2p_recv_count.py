"""mistake: a two-stage pipeline where stage 0 sends one micro-batch per step and stage 1 expects
two (its micro-batch count comes from a different config field).
label: D19
alternates: D21
first_rank: 1
launch: torchrun --nproc-per-node 2 eval/runs/scripts/p2p_recv_count.py
source: none known
"""

from datetime import timedelta

import torch
import torch.distributed as dist

CFG = {"micro_batches": 1, "pipeline": {"micro_batches": 2}}


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=15))
    rank = dist.get_rank()
    for step in range(2):
        if rank == 0:
            for _ in range(CFG["micro_batches"]):
                dist.send(torch.randn(4, 8), dst=1)
        else:
            for mb in range(CFG["pipeline"]["micro_batches"]):
                act = torch.empty(4, 8)
                dist.recv(act, src=0)
                print(f"stage 1 step {step} micro-batch {mb}", flush=True)
    print(f"rank {rank} finished", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
