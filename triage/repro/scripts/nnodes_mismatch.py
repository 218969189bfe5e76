"""D2: a two-node torchrun command (--nnodes=2) started on one node only: the agent waits for the
other node at the rendezvous until it gives up. The script itself never runs."""

import torch.distributed as dist


def main() -> None:
    """Run this reproduction as one rank of the job (it never starts)."""
    dist.init_process_group("gloo")
    print(f"rank {dist.get_rank()} of {dist.get_world_size()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
