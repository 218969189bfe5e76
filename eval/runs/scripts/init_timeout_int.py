"""mistake: the collective timeout is raised for a slow dataset with `timeout=3600` (seconds as a
plain int) in init_process_group, which wants a datetime.timedelta.
label: none
alternates: MN3
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/init_timeout_int.py
source: none known
written: session 9, unseen
"""

import torch
import torch.distributed as dist

INIT_TIMEOUT_S = 3600


def main():
    dist.init_process_group(backend="gloo", timeout=INIT_TIMEOUT_S)
    t = torch.ones(4)
    dist.all_reduce(t)
    print(t)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
