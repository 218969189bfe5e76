"""mistake: the user exports RANK=0 and WORLD_SIZE=2 by hand and starts one `python train.py`,
expecting it to start both workers; rank 0 waits for a rank 1 that never comes (timeout 10 s in
the script's init).
label: D1
first_rank: none
launch: MASTER_ADDR=127.0.0.1 RANK=0 WORLD_SIZE=2 python eval/runs/scripts/plain_python_world2.py
source: none known
"""

import logging
from datetime import timedelta

import torch
import torch.distributed as dist

log = logging.getLogger("train")


def main():
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log.info("initialising process group")
    dist.init_process_group(backend="gloo", timeout=timedelta(seconds=10))
    log.info("rank %d of %d", dist.get_rank(), dist.get_world_size())
    t = torch.ones(3)
    dist.all_reduce(t)
    log.info("sum %s", t.tolist())


if __name__ == "__main__":
    main()
