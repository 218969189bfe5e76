"""mistake: the launcher's options are written after the script, `python -m torch.distributed.run
train.py --nproc-per-node 2`, so the launcher starts its default of one process and hands
`--nproc-per-node 2` to the script, whose argparse rejects the unknown argument.
label: none
alternates: D1
first_rank: none
launch: python -m torch.distributed.run eval/runs/scripts/run_module_args_after_script.py --nproc-per-node 2 --epochs 1
source: none known
written: session 11b, unseen
"""

import argparse

import torch
import torch.distributed as dist


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.01)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    t = torch.ones(1)
    dist.all_reduce(t)
    print(f"world {dist.get_world_size()} epochs {args.epochs}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
