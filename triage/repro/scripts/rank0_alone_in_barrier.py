"""MN3 (rank 0 works alone): the main process tokenises the dataset and writes the cache while the
other ranks wait for it at a barrier (the `main_process_first()` pattern). The work takes longer
than the collective timeout, so the waiting rank is killed although nothing is wrong."""

import datetime
import time

import torch.distributed as dist


def main() -> None:
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=4))
    rank = dist.get_rank()
    if rank == 0:
        print("rank 0: tokenizing the dataset and writing the cache ...", flush=True)
        time.sleep(10)  # longer than the 4 s the group allows
    dist.barrier()  # the other ranks wait here for the cache
    print(f"rank {rank}: dataset ready", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
