"""mistake: the README's torchrun command was shortened to `python train.py --nproc_per_node 2
--epochs 1` (the launcher's flag given to the script, no launcher at all); the script's argparse
rejects the unknown option.
label: D1
first_rank: none
launch: python eval/runs/scripts/python_with_launcher_flags.py --nproc_per_node 2 --epochs 1
source: none known
written: session 12b, unseen
"""

import argparse
import os

import torch.distributed as dist


def main():
    parser = argparse.ArgumentParser(description="train a small model with DDP")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--lr", type=float, default=0.1)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    print(f"rank {os.environ['RANK']} training for {args.epochs} epochs")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
