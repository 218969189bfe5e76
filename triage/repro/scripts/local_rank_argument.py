"""D1: the local rank passed on the command line by one launcher and in the environment by the
other. TRIAGE_REPRO_HOW says which script this is:

- `rejects`: written for torchrun (reads LOCAL_RANK from the environment, accepts only its own
  options), started with the deprecated `python -m torch.distributed.launch`, which passes
  --local-rank=N;
- `requires`: written for torch.distributed.launch (requires a --local_rank option), started with
  torchrun, which passes nothing on the command line."""

import argparse
import datetime
import os

import torch.distributed as dist


def main() -> None:
    """Run this reproduction as one rank of the job."""
    parser = argparse.ArgumentParser(description="train")
    parser.add_argument("--epochs", type=int, default=1)
    if os.environ.get("TRIAGE_REPRO_HOW") == "requires":
        parser.add_argument("--local_rank", type=int, required=True)
    args = parser.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    local_rank = getattr(args, "local_rank", os.environ.get("LOCAL_RANK"))
    print(f"rank {dist.get_rank()} local rank {local_rank} epochs {args.epochs}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
