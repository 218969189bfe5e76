"""Each rank decodes its shard with a few reader threads that meet at a `threading.Barrier`
before the main thread builds the epoch's index (the readers fill per-thread buffers first). The
job syncs ranks with `dist.monitored_barrier` "to see which rank is slow", given a two-hour
timeout because preprocessing is long.

Hang class: one rank stuck outside torch (a reader thread raised, so the thread barrier never
fills and its main thread waits for ever) while the others wait in a collective whose timeout is
far away: the timeout hides the stuck rank.
Label: MN3
Odd ranks: 1
Launch: mp.spawn 3
Held out: session 13

Rank 1's second reader hits a corrupt record and dies (its traceback printed); rank 1's main
thread waits in `threading.Barrier.wait()`; ranks 0 and 2 wait in `monitored_barrier`.
"""

import os
import threading
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

N_READERS = 3


def decode(record: bytes) -> torch.Tensor:
    if record.startswith(b"\x00"):
        raise ValueError("corrupt record header")
    return torch.frombuffer(bytearray(record), dtype=torch.uint8).float()


def reader(idx: int, records: list[bytes], out: list[list[torch.Tensor]],
           gate: threading.Barrier) -> None:  # fmt: skip
    out[idx] = [decode(r) for r in records[idx::N_READERS]]
    gate.wait()


def load_shard(rank: int) -> list[torch.Tensor]:
    records = [bytes([1 + (i % 200)]) * 32 for i in range(30)]
    if rank == 1:
        records[4] = b"\x00" + records[4][1:]  # one bad record in this rank's shard
    out: list[list[torch.Tensor]] = [[] for _ in range(N_READERS)]
    gate = threading.Barrier(N_READERS + 1)
    for i in range(N_READERS):
        threading.Thread(target=reader, args=(i, records, out, gate), daemon=True).start()
    gate.wait()  # all buffers filled
    return [t for part in out for t in part]


def worker(rank: int, world_size: int) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ.setdefault("MASTER_PORT", "29611")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    samples = load_shard(rank)
    dist.monitored_barrier(timeout=timedelta(hours=2))
    total = torch.tensor([float(len(samples))])
    dist.all_reduce(total)
    if rank == 0:
        print(f"{int(total.item())} samples", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(3,), nprocs=3, join=True)
