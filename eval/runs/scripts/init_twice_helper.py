"""mistake: a `setup_distributed()` helper copied from another project already calls
init_process_group, and main() calls it again right after (both kept while merging two recipes).
label: none
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/init_twice_helper.py
source: none known
written: session 10, unseen
"""

import os

import torch
import torch.distributed as dist


def setup_distributed():
    dist.init_process_group(backend="gloo")
    return int(os.environ["LOCAL_RANK"])


def main():
    local_rank = setup_distributed()
    dist.init_process_group(backend="gloo")
    t = torch.ones(3) * local_rank
    dist.all_reduce(t)
    print(f"rank {dist.get_rank()}: {t.tolist()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
