"""mistake: rank 0 broadcasts its tokenizer object with `broadcast_object_list`; the class's
`__setstate__` reopens its vocabulary file from the path stored on rank 0 (a temporary directory
rank 0 built it in and has already cleaned up), so unpickling fails on rank 1 with FileNotFoundError inside the broadcast,
and rank 0 goes on to the next collective alone.
label: none
alternates: D20
first_rank: 1
launch: torchrun --nproc-per-node 2 eval/runs/scripts/broadcast_object_setstate_rank1.py
source: none known
written: session 12c, unseen
"""

import os
import tempfile
from datetime import timedelta

import torch
import torch.distributed as dist


class Tokenizer:
    def __init__(self, vocab_path):
        self.vocab_path = vocab_path
        self._load()

    def _load(self):
        with open(self.vocab_path) as f:
            self.vocab = {w.strip(): i for i, w in enumerate(f)}

    def __getstate__(self):
        return {"vocab_path": self.vocab_path}

    def __setstate__(self, state):
        self.vocab_path = state["vocab_path"]
        self._load()


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=12))
    rank = dist.get_rank()
    objs = [None]
    if rank == 0:
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "vocab.txt")
            with open(path, "w") as f:
                f.write("<pad>\nhello\nworld\n")
            objs[0] = Tokenizer(path)
    dist.broadcast_object_list(objs, src=0)
    tok = objs[0]
    n = torch.tensor([len(tok.vocab)])
    dist.all_reduce(n)
    print(f"rank {rank} vocab total {n.item()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
