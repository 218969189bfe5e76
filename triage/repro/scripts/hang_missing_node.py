"""P1, hanging before any rank runs: this script is fine, its launch is not. torchrun is told of two
nodes (`--nnodes=2 --node-rank=0`) and only node 0 is started, so its agent waits in the rendezvous
for node 1 and starts no worker: nothing of this file ever runs, and no process has a RANK.
"""

import datetime

import torch
import torch.distributed as dist


def main() -> None:
    """Run this reproduction as one rank of the job (it never gets that far)."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
    dist.all_reduce(torch.ones(4))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
