"""mistake: an older recipe is started with the deprecated `python -m torch.distributed.launch`,
which passes `--local-rank=N` to the script, but the script's argparse only declares
`--local_rank` (the underscore spelling of old torch versions), so every worker exits at argument
parsing.
label: none
alternates: D1
first_rank: none
launch: python -m torch.distributed.launch --nproc-per-node 2 eval/runs/scripts/launch_local_rank_argparse.py --epochs 1
source: https://github.com/skycrapers/TecoGAN-PyTorch/issues/31
written: session 10, unseen
"""

import argparse

import torch
import torch.distributed as dist


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=10)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    t = torch.ones(2) * args.local_rank
    dist.all_reduce(t)
    print(f"local rank {args.local_rank}: {t.tolist()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
