"""Each rank tokenises its own shard of the corpus, then all meet at
`dist.monitored_barrier(wait_all_ranks=True)` "so the log names the rank that is slow", with a
two-hour timeout because tokenising is slow. A heartbeat thread (not a daemon) writes each rank's
progress to a file for the dashboard.

Hang class: one rank crashed (its traceback printed) but its process stays alive through a
non-daemon thread; the others wait for it in the monitored barrier, which names it only when its
timeout runs out.
Label: D20
Odd ranks: 2
Launch: python 3
Held out: session 12c

Rank 2 meets a record with no text and raises KeyError: its main thread ends with a traceback,
its heartbeat thread keeps the process alive. Rank 0 waits in `monitored_barrier` for rank 2's
message; rank 1 waits there for rank 0's answer.
"""

import datetime
import os
import tempfile
import threading
import time

import torch
import torch.distributed as dist


def heartbeat(rank: int, progress: dict) -> None:
    path = os.path.join(tempfile.gettempdir(), f"w_heartbeat_{rank}.txt")
    while not progress.get("done"):
        with open(path, "w") as f:
            f.write(f"{progress.get('n', 0)}\n")
        time.sleep(0.5)


def records(rank: int, n: int) -> list[dict]:
    out = [{"id": i, "text": f"sample {i} from shard {rank} " * 8} for i in range(n)]
    if rank == 2:
        out[n // 2] = {"id": n // 2, "body": ""}  # a malformed line of that shard
    return out


def main() -> None:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world)
    progress: dict = {}
    threading.Thread(target=heartbeat, args=(rank, progress), name="heartbeat").start()
    vocab: dict[str, int] = {}
    tokens = []
    for i, rec in enumerate(records(rank, 2000)):
        tokens.append([vocab.setdefault(w, len(vocab)) for w in rec["text"].split()])
        progress["n"] = i
    dist.monitored_barrier(timeout=datetime.timedelta(hours=2), wait_all_ranks=True)
    progress["done"] = True
    torch.save(tokens, os.path.join(tempfile.gettempdir(), f"w_tokens_{rank}.pt"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
