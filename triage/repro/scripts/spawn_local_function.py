"""E14: torch.multiprocessing.spawn is given a function defined inside main(); the spawn start
method has to pickle it for the child processes, and local functions cannot be pickled."""

import os

import torch.distributed as dist
import torch.multiprocessing as mp


def main() -> None:
    world_size = 2
    port = os.environ.get("MASTER_PORT", "29533")

    def worker(rank: int) -> None:  # a closure over world_size and port: not picklable
        dist.init_process_group(
            "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size
        )
        dist.barrier()
        dist.destroy_process_group()

    mp.spawn(worker, nprocs=world_size, join=True)  # type: ignore[attr-defined,no-untyped-call]


if __name__ == "__main__":
    main()
