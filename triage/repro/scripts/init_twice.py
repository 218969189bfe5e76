"""D6: the training script calls init_process_group, then a helper (a framework's setup, or
deepspeed.init_distributed in other code) initialises the default group again."""

import datetime

import torch.distributed as dist


def setup_distributed() -> None:
    """The helper from a library or an older part of the code base: initialises unconditionally."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))


def main() -> None:
    """Run this reproduction as one rank of the job."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    setup_distributed()
    print(f"rank {dist.get_rank()} ready", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
