"""D20 with the crashed rank's process still alive: rank 1's training loop raises (its traceback
is printed) but a non-daemon heartbeat thread keeps the interpreter from exiting, so the launcher
sees no exit and rank 0 waits in DDP's gradient all-reduce for ever. Rank 1's main thread is at
the interpreter's exit (threading._shutdown), with no line of the script on its stack.
"""

import datetime
import threading
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def heartbeat(stop: threading.Event) -> None:
    """Report that the rank is alive, until told to stop (never, once the main thread has died)."""
    while not stop.is_set():
        time.sleep(0.5)


def main() -> None:
    """Run this reproduction as one rank of the job."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
    rank = dist.get_rank()
    stop = threading.Event()
    threading.Thread(target=heartbeat, args=(stop,), name="heartbeat").start()
    model = DistributedDataParallel(nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(1000):
        if rank == 1 and step == 3:
            raise KeyError(f"lr schedule has no step {step}")  # the suspect stops here: its script ends
        loss = model(torch.randn(8, 4)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()  # the others wait here
        optimizer.step()
    stop.set()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
