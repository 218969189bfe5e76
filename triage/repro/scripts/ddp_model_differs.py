"""E20: each rank sizes its embedding from a vocabulary built from its own data shard, so the
models differ when DDP is built; rank 1's embedding does not match rank 0's."""

import datetime

import torch
import torch.distributed as dist

# Each rank reads its own shard, and builds the vocabulary from it rather than from the whole
# corpus (or a shared tokenizer): rank 0 finds 5 distinct words, rank 1 finds 8.
SHARDS = ("the cat sat on the mat", "a dog ran in the park with a ball")


def main() -> None:
    """Run this reproduction as one rank of the job."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank = dist.get_rank()
    vocab = sorted(set(SHARDS[rank % len(SHARDS)].split()))
    print(f"rank {rank}: vocabulary of {len(vocab)} words", flush=True)
    net = torch.nn.Sequential(torch.nn.Embedding(len(vocab), 8), torch.nn.Linear(8, 1))
    model = torch.nn.parallel.DistributedDataParallel(net)
    print(f"rank {rank}: {type(model).__name__} built", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
