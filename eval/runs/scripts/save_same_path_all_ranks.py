"""mistake: the end-of-epoch checkpoint is written by every rank to the same `last.pt` (no rank
guard), and the next phase reloads it right away; rank 1 finishes its (longer) validation later and
truncates and rewrites the file while rank 0 is reading it, so rank 0 loads a torn archive.
label: D23
alternates: D15
first_rank: 0
launch: rm -rf /tmp/r9b_ckpt && torchrun --nproc-per-node 2 eval/runs/scripts/save_same_path_all_ranks.py
source: none known
written: session 9b, unseen
"""

import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn

OUT = "/tmp/r9b_ckpt"


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    os.makedirs(OUT, exist_ok=True)
    model = nn.Sequential(*[nn.Linear(1024, 1024) for _ in range(24)])
    path = os.path.join(OUT, "last.pt")
    # validation: rank 1's shard holds more batches
    for _ in range(3 if rank == 0 else 6):
        with torch.no_grad():
            model(torch.randn(64, 1024))
    if rank == 1:
        time.sleep(0.2)
    torch.save(model.state_dict(), path)
    print(f"rank {rank} saved {path}", flush=True)
    for _ in range(20):
        state = torch.load(path, map_location="cpu")
        model.load_state_dict(state)
        time.sleep(0.05)
    print(f"rank {rank} reloaded", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
