"""Attention that switches to a sequence-parallel path (all_gather of keys) for long inputs.

Hang class: a collective inside the model's forward, reached only when this rank's batch is
longer than a threshold; the batch lengths differ per rank.
Label: D21
Odd ranks: 1
Launch: mp.spawn 2
Held out: session 10

To fit long documents, `ChunkedAttention.forward` splits sequences over the ranks of a
sequence-parallel group and all-gathers the keys and values, but only when `seq_len >
max_local_len`; short batches run locally. Batches are bucketed by length per rank, so at step 7
rank 1 gets a long bucket and enters the all_gather on the sequence-parallel group, while rank 0
(short bucket) finishes its forward and waits in DDP's gradient all-reduce on the default group.
"""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


class ChunkedAttention(nn.Module):
    def __init__(self, dim: int, max_local_len: int, sp_group: dist.ProcessGroup) -> None:
        super().__init__()
        self.qkv, self.out = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.max_local_len, self.sp_group = max_local_len, sp_group

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        if x.shape[1] > self.max_local_len:
            k, v = self._gather_kv(k, v)
        att = torch.softmax(q @ k.transpose(1, 2) / q.shape[-1] ** 0.5, dim=-1)
        return self.out(att @ v)

    def _gather_kv(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        world = dist.get_world_size(self.sp_group)
        kv = torch.cat([k, v], dim=-1).contiguous()
        parts = [torch.empty_like(kv) for _ in range(world)]
        dist.all_gather(parts, kv, group=self.sp_group)
        full = torch.cat(parts, dim=1)
        return full.chunk(2, dim=-1)  # type: ignore[return-value]


def bucket_length(rank: int, step: int) -> int:
    return 512 if (rank == 1 and step == 7) else 64 + 16 * (step % 4)


def worker(rank: int, world: int) -> None:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", os.environ.get("HANG_MASTER_PORT", "29533"))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    sp_group = dist.new_group(list(range(world)))
    model = DDP(nn.Sequential(nn.Embedding(200, 32), ChunkedAttention(32, 256, sp_group), nn.Linear(32, 200)))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    for step in range(10_000):
        ids = torch.randint(0, 200, (4, bucket_length(rank, step)))
        logits = model(ids[:, :-1])
        loss = nn.functional.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(2,), nprocs=2, join=True)
