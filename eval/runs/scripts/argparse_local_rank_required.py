"""mistake: an HF-style training script declares `--local_rank` as a required argparse option (from
the `torch.distributed.launch` era, which passed it) and is started with torchrun, which only sets
LOCAL_RANK in the environment; argparse stops every worker before anything distributed starts.
label: none
alternates: D1
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/argparse_local_rank_required.py --model_name tiny-bert --per_device_train_batch_size 8
source: https://github.com/huggingface/transformers/issues/22171
written: session 11c, unseen
"""

import argparse

import torch
import torch.distributed as dist


def parse_args():
    parser = argparse.ArgumentParser(description="fine-tune a classifier")
    parser.add_argument("--model_name", type=str, required=True)
    parser.add_argument("--per_device_train_batch_size", type=int, default=8)
    parser.add_argument("--learning_rate", type=float, default=5e-5)
    parser.add_argument("--local_rank", type=int, required=True, help="set by the launcher")
    return parser.parse_args()


def main():
    args = parse_args()
    dist.init_process_group("gloo", rank=args.local_rank)
    model = torch.nn.Linear(8, 2)
    print(f"rank {dist.get_rank()} training {args.model_name} ({sum(p.numel() for p in model.parameters())} params)")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
