"""mistake: the ranks are started by hand with tcp:// init, and the script takes the world size from
$WORLD_SIZE, which the user's shell still exports as 4 from last week's four-process experiment;
the two started ranks wait for two more that never come (init timeout 15 s).
label: D1
alternates: P1
first_rank: none
launch: export WORLD_SIZE=4; RANK=0 python eval/runs/scripts/stale_world_size_env.py & RANK=1 python eval/runs/scripts/stale_world_size_env.py; wait
source: none known
written: session 10, unseen
"""

import os
from datetime import timedelta

import torch
import torch.distributed as dist


def main():
    rank = int(os.environ["RANK"])
    world_size = int(os.environ.get("WORLD_SIZE", "2"))
    port = os.environ.get("MASTER_PORT", "29500")
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
        timeout=timedelta(seconds=15),
    )
    t = torch.ones(4)
    dist.all_reduce(t)
    print(f"rank {rank}: {t.tolist()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
