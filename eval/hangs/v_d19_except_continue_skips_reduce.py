"""A training loop that keeps going past bad samples: the whole step sits in a `try` whose
`except Exception: continue` logs the error and moves to the next step. On rank 1 a record in
its shard fails to decode, so that rank skips one step, collectives included.

Hang class: a swallowed per-rank exception that skips one step's collective (the ranks' collective
counts part); the rank that skipped finishes first and waits in the closing barrier.
Label: D19
Odd ranks: 1
Launch: torchrun 2
Held out: session 12b

Rank 1 waits in the `dist.barrier()` after the loop; rank 0 waits in the loss all_reduce of the
last step.
"""

import json
import logging

import torch
import torch.distributed as dist
from torch import nn

log = logging.getLogger("train")


def decode(record: bytes) -> torch.Tensor:
    values = json.loads(record.decode("utf-8"))["x"]
    return torch.tensor(values, dtype=torch.float32)


def make_shard(rank: int, n: int) -> list[bytes]:
    records = [json.dumps({"x": [float(i % 7)] * 16}).encode() for i in range(n)]
    if rank == 1:
        records[37] = b'{"x": [1.0, 2.0,'  # truncated while the shard was written
    return records


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Linear(16, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    shard = make_shard(rank, 200)
    running = 0.0
    for step, record in enumerate(shard):
        try:
            x = decode(record).unsqueeze(0)
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
                p.grad /= world
            opt.step()
            mean_loss = loss.detach().clone()
            dist.all_reduce(mean_loss)
            running += mean_loss.item() / world
        except Exception as exc:  # noqa: BLE001 - a bad sample must not kill a long run
            log.warning("step %d skipped: %s", step, exc)
            continue
    dist.barrier()
    if rank == 0:
        print(f"mean loss {running / len(shard):.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
