"""mistake: every rank raises the same error at the same moment (a config value parsed as a string
and used as a number) and the output is collected with `--tee 3`: four tracebacks interleave
line by line in the terminal.
label: P4
first_rank: none
launch: torchrun --tee 3 --nproc-per-node 4 eval/runs/scripts/tee_all_ranks_raise.py
source: none known
"""

import os

import torch.distributed as dist

CONFIG = {"warmup_steps": "100", "max_steps": 1000}


def schedule(step):
    return min(1.0, step / CONFIG["warmup_steps"])


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    print(f"rank {rank} pid {os.getpid()} starting", flush=True)
    dist.barrier()
    for step in range(3):
        print(f"rank {rank} lr factor {schedule(step):.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
