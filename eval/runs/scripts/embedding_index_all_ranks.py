"""mistake: an ordinary model bug: the token ids come from a tokenizer with 30522 entries but the
embedding table was built for 30000 (a hard-coded vocab size), so every rank raises "index out
of range" in forward. Nothing distributed is wrong.
label: none
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/embedding_index_all_ranks.py
source: none known
written: session 9, unseen
"""

import torch
import torch.distributed as dist
import torch.nn as nn

VOCAB_SIZE = 30000
TOKENIZER_SIZE = 30522


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB_SIZE, 32)
        self.out = nn.Linear(32, 2)

    def forward(self, ids):
        return self.out(self.embed(ids).mean(dim=1))


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = nn.parallel.DistributedDataParallel(TinyLM())
    ids = torch.randint(0, TOKENIZER_SIZE, (4, 64), generator=torch.Generator().manual_seed(7))
    loss = model(ids).sum()
    loss.backward()
    print(f"rank {rank} ok", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
