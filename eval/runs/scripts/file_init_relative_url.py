"""mistake: the process group is initialised through a shared file with
`init_method="file://rendezvous.tmp"` (a relative path after `file://`, as one writes `./` paths),
and the ranks are started by hand, one `python` each; the URL's part after `//` is read
as a host name, so the rendezvous has no path and every rank raises.
label: none
first_rank: none
launch: RANK=0 python eval/runs/scripts/file_init_relative_url.py & RANK=1 python eval/runs/scripts/file_init_relative_url.py; wait
source: none known
written: session 10, unseen
"""

import os
from datetime import timedelta

import torch
import torch.distributed as dist


def main():
    rank = int(os.environ["RANK"])
    dist.init_process_group(
        "gloo", init_method="file://rendezvous.tmp", rank=rank, world_size=2,
        timeout=timedelta(seconds=15),
    )
    t = torch.ones(2)
    dist.all_reduce(t)
    print(f"rank {rank}: {t.tolist()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
