"""mistake: the ranks are started by hand, one `python` per rank with env:// variables, and the
script passes `rank=os.environ["RANK"]` and `world_size=os.environ["WORLD_SIZE"]` to
init_process_group as they come, strings, instead of converting them with int().
label: none
alternates: D1
first_rank: none
launch: MASTER_ADDR=127.0.0.1 RANK=0 WORLD_SIZE=2 python eval/runs/scripts/init_rank_string_env.py & MASTER_ADDR=127.0.0.1 RANK=1 WORLD_SIZE=2 python eval/runs/scripts/init_rank_string_env.py; wait
source: none known
written: session 11b, unseen
"""

import os
from datetime import timedelta

import torch
import torch.distributed as dist


def main():
    dist.init_process_group(
        "gloo",
        rank=os.environ["RANK"],
        world_size=os.environ["WORLD_SIZE"],
        timeout=timedelta(seconds=15),
    )
    t = torch.ones(2) * dist.get_rank()
    dist.all_reduce(t)
    print(f"rank {dist.get_rank()}: {t.tolist()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
