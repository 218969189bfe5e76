"""mistake: a torchrun training script (LOCAL_RANK from the environment) is run with plain
`python train.py` to "try it on one process first".
label: D1
first_rank: none
launch: python eval/runs/scripts/local_rank_plain_python.py --epochs 1
source: none known
"""

import argparse
import logging
import os

import torch
import torch.distributed as dist
import torch.nn as nn

logger = logging.getLogger(__name__)


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=3)
    return p.parse_args()


def main():
    args = parse()
    logging.basicConfig(level=logging.INFO, format="[%(levelname)s] %(message)s")
    local_rank = int(os.environ["LOCAL_RANK"])
    logger.info("local rank %d", local_rank)
    dist.init_process_group("gloo")
    model = nn.parallel.DistributedDataParallel(nn.Linear(10, 1))
    for epoch in range(args.epochs):
        loss = model(torch.randn(8, 10)).pow(2).mean()
        loss.backward()
        logger.info("epoch %d loss %.4f", epoch, loss.item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
