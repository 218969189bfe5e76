"""mistake: the logging setup runs at import time and asks `dist.get_rank()` to prefix its messages,
before main() has called init_process_group.
label: E4
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/get_rank_before_init.py
source: none known
written: session 9, unseen
"""

import logging

import torch
import torch.distributed as dist


def make_logger():
    logger = logging.getLogger("trainer")
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter(f"[rank{dist.get_rank()}] %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    return logger


log = make_logger()


def main():
    dist.init_process_group("gloo")
    t = torch.ones(1)
    dist.all_reduce(t)
    log.info("sum %s", t.item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
