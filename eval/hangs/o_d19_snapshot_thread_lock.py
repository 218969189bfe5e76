"""An asynchronous snapshot thread and the training loop share a lock; each side holds it across a collective.

Hang class: a lock-order deadlock across ranks: on one rank the training thread takes the lock
first and waits in the gradient all_reduce, on the other the snapshot thread takes it first and
waits in its own group's gather; each rank's other thread waits for the lock.
Label: D19
Odd ranks:
Launch: torchrun 2
Held out: session 10b

Every 10 steps the loop starts a snapshot thread (its collectives on a group of their own, "so
they never interleave with training's"). The thread takes `state_lock` so the weights do not
move while it copies them, then gathers each rank's snapshot size. The loop takes the same lock
around the gradient all_reduce and `opt.step()`. Rank 0's thread first records the code version
(`git rev-parse`, a child process), so on rank 0 the loop wins the lock; on rank 1 the thread
wins. Rank 0: loop in all_reduce, thread on the lock; rank 1: thread in all_gather_object, loop
on the lock.
"""

import subprocess
import threading

import torch
import torch.distributed as dist
from torch import nn

state_lock = threading.Lock()


def snapshot(model: nn.Module, step: int, group: dist.ProcessGroup) -> None:
    if dist.get_rank() == 0:
        subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, check=False)
    with state_lock:
        copy = {k: v.detach().clone() for k, v in model.state_dict().items()}
        sizes: list[object] = [None] * dist.get_world_size()
        dist.all_gather_object(sizes, sum(t.numel() for t in copy.values()), group=group)
    print(f"snapshot {step}: {sizes}", flush=True)


def main() -> None:
    dist.init_process_group("gloo")
    world = dist.get_world_size()
    snap_group = dist.new_group(backend="gloo")
    model = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(1, 10_000):
        x = torch.randn(64, 32)
        loss = model(x).pow(2).mean()
        loss.backward()
        with state_lock:
            for p in model.parameters():
                dist.all_reduce(p.grad)
                p.grad /= world
            opt.step()
        opt.zero_grad()
        if step % 10 == 0:
            threading.Thread(target=snapshot, args=(model, step, snap_group)).start()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
