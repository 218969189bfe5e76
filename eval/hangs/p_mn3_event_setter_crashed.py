"""Rank 0 builds the token cache in a helper process and waits on a `multiprocessing.Event` that
the helper sets when the cache is written; the helper crashes on a malformed record.

Hang class: one rank waits on an event whose setter process died (a traceback in the log, exit 1,
then silence), while the others wait in the barrier after the cache step.
Label: MN3
Odd ranks: 0
Launch: torchrun 2
Held out: session 11

The cache is built in a separate process so that the tokenizer's memory is freed when it ends.
`build_cache` sets `done` only after writing the last shard; a record with no text field raises a
KeyError in the child, which prints its traceback and exits, and `done.wait()` (no timeout) on
rank 0 never returns. Rank 1 waits in `dist.barrier()` for rank 0 to finish the cache.
"""

import json
import multiprocessing
import os
import tempfile

import torch
import torch.distributed as dist
from torch import nn


def records() -> list[str]:
    rows = [json.dumps({"id": i, "text": f"sample {i} " * (1 + i % 5)}) for i in range(500)]
    rows[377] = json.dumps({"id": 377, "body": "migrated from the old schema"})
    return rows


def build_cache(rows: list[str], out_dir: str, done) -> None:  # noqa: ANN001
    for start in range(0, len(rows), 100):
        shard = [[ord(c) % 97 for c in json.loads(r)["text"]] for r in rows[start : start + 100]]
        with open(os.path.join(out_dir, f"shard{start // 100}.json"), "w") as handle:
            json.dump(shard, handle)
    done.set()


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    cache = os.path.join(tempfile.gettempdir(), "token-cache")
    os.makedirs(cache, exist_ok=True)
    if rank == 0:
        done = multiprocessing.Event()
        helper = multiprocessing.Process(target=build_cache, args=(records(), cache, done))
        helper.start()
        done.wait()
        helper.join()
    dist.barrier()  # the cache is ready
    model = nn.Embedding(97, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for name in sorted(os.listdir(cache))[rank::world]:
        with open(os.path.join(cache, name)) as handle:
            for tokens in json.load(handle):
                loss = model(torch.tensor(tokens)).pow(2).mean()
                loss.backward()
                dist.all_reduce(model.weight.grad)
                opt.step()
                opt.zero_grad()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
