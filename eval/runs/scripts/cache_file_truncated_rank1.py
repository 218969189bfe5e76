"""mistake: each rank caches its preprocessed shard as `shard{rank}.pt` and reuses it when the file
exists; an earlier run was killed while rank 1 wrote its cache, leaving a truncated file, so rank 1
fails to load it while rank 0 goes on into DDP. `--redirects 3 --log-dir`, main under `@record`.
label: D20
first_rank: 1
launch: rm -rf /tmp/r13b_cache /tmp/r13b_cache_logs && mkdir -p /tmp/r13b_cache && head -c 300 /dev/urandom > /tmp/r13b_cache/shard1.pt && torchrun --redirects 3 --log-dir /tmp/r13b_cache_logs --nproc-per-node 2 eval/runs/scripts/cache_file_truncated_rank1.py
source: none known
written: session 13b, unseen
"""

import os
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP

CACHE = "/tmp/r13b_cache"


def load_shard(rank):
    path = os.path.join(CACHE, f"shard{rank}.pt")
    if os.path.exists(path):
        return torch.load(path)
    g = torch.Generator().manual_seed(rank)
    shard = {"x": torch.randn(64, 16, generator=g), "y": torch.randn(64, 1, generator=g)}
    torch.save(shard, path)
    return shard


@record
def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=30))
    rank = dist.get_rank()
    shard = load_shard(rank)
    model = DDP(nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for i in range(0, 64, 8):
        loss = nn.functional.mse_loss(model(shard["x"][i : i + 8]), shard["y"][i : i + 8])
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
