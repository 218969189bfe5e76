"""Throughput logging every N tokens, averaged across ranks on a separate metrics group.

Hang class: a collective issued when a per-rank counter crosses a threshold; the ranks' counters
differ, so one rank logs while the other is still training.
Label: D19
Odd ranks: 0
Launch: python 2
Held out: session 10

One `python` per rank from a shell loop (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). Metrics go
through their own gloo group so they never queue behind gradients. Logging happens "every
50k tokens": `tokens_seen` counts each rank's non-padding tokens, which differ because the
sequence lengths differ per shard. Rank 0, whose sequences are longer, crosses 50k first and waits
in the metrics all_reduce; rank 1 waits in the gradient all_reduce on the default group.
"""


import torch
import torch.distributed as dist
from torch import nn

LOG_EVERY_TOKENS = 50_000


def batch(rank: int, step: int) -> torch.Tensor:
    lengths = torch.randint(64, 128, (16,)) if rank == 0 else torch.randint(32, 128, (16,))
    ids = torch.zeros(16, 128, dtype=torch.long)
    for i, n in enumerate(lengths.tolist()):
        ids[i, :n] = torch.randint(1, 100, (n,))
    return ids


def main() -> None:
    dist.init_process_group("gloo")
    torch.manual_seed(dist.get_rank())
    rank, world = dist.get_rank(), dist.get_world_size()
    metrics_group = dist.new_group(backend="gloo")
    emb, head = nn.Embedding(100, 32), nn.Linear(32, 100)
    params = [*emb.parameters(), *head.parameters()]
    opt = torch.optim.SGD(params, lr=0.1)
    tokens_seen, next_log = 0, LOG_EVERY_TOKENS
    for step in range(100_000):
        ids = batch(rank, step)
        mask = ids[:, 1:] > 0
        logits = head(emb(ids[:, :-1]))
        loss = nn.functional.cross_entropy(logits[mask], ids[:, 1:][mask])
        loss.backward()
        for p in params:
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
        opt.zero_grad()
        tokens_seen += int(mask.sum())
        if tokens_seen >= next_log:
            stats = torch.tensor([loss.item(), float(tokens_seen)])
            dist.all_reduce(stats, group=metrics_group)
            if rank == 0:
                print(f"step {step} loss {stats[0] / world:.3f} tokens {int(stats[1])}", flush=True)
            next_log += LOG_EVERY_TOKENS
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
