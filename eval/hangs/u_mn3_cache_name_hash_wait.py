"""Rank 0 tokenises the corpus once and writes the cache under a name derived from the tokenizer
settings with `hash(...)`; the other ranks poll for that file before loading it. Python salts
`hash()` of strings per process, so each rank computes a different file name.

Hang class: ranks stuck in the user's own wait loop (`while not os.path.exists(path)`), outside
any collective, while the rank that went on waits in one.
Label: MN3
Odd ranks: 1 2
Launch: python 3
Held out: session 12

Rank 0 writes `tokens-<its hash>.pt` and waits in the barrier before training; ranks 1 and 2
sleep in `wait_for_cache`, polling for file names nobody writes.
"""

import os
import tempfile
import time

import torch
import torch.distributed as dist

TOKENIZER = {"name": "bpe-32k", "lowercase": "false", "max_len": "512"}


def cache_path(root: str) -> str:
    key = hash(tuple(sorted(TOKENIZER.items())))
    return os.path.join(root, f"tokens-{key & 0xFFFFFFFF:08x}.pt")


def tokenize_corpus() -> torch.Tensor:
    return torch.randint(0, 32000, (2048, 128))


def wait_for_cache(path: str, poll: float = 1.0) -> None:
    while not os.path.exists(path):
        time.sleep(poll)


def main() -> None:
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", rank=rank, world_size=int(os.environ["WORLD_SIZE"]))
    root = os.path.join(tempfile.gettempdir(), f"u_tok_cache_{os.environ['MASTER_PORT']}")
    os.makedirs(root, exist_ok=True)
    path = cache_path(root)
    if rank == 0:
        torch.save(tokenize_corpus(), path)
    else:
        wait_for_cache(path)
    tokens = torch.load(path)
    dist.barrier()
    for step in range(100):
        x = tokens[step % len(tokens)].float().mean().reshape(1)
        dist.all_reduce(x)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
