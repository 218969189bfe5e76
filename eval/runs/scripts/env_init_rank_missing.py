"""mistake: the user tries the job on one process first with plain `python train.py`, having
exported WORLD_SIZE=2 and MASTER_ADDR/MASTER_PORT in the shell (from the launcher's docs) but not
RANK; the script calls `init_process_group("gloo")` with the default env:// init and no rank, which
env:// reads from the environment.
label: D1
first_rank: none
launch: WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 python eval/runs/scripts/env_init_rank_missing.py --epochs 1
source: none known
written: session 11, unseen
"""

import argparse

import torch
import torch.distributed as dist


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    model = torch.nn.Linear(8, 2)
    for epoch in range(args.epochs):
        loss = model(torch.randn(4, 8)).sum()
        loss.backward()
        print(f"epoch {epoch} loss {loss.item():.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
