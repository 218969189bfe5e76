"""mistake: a small causal LM sharded with FSDP2's `fully_shard` generates answers for the evaluation
prompts with a hand-written greedy loop that stops as soon as every sequence of the local batch has
produced the end token (`if finished.all(): break`); rank 0's prompts finish after two tokens, rank
1's keep going, so rank 1's next forward waits in FSDP's parameter all-gather that rank 0 never joins
(rank 0 goes on to the final barrier; timeout 15 s).
label: D21
alternates: D9
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/fsdp2_generate_eos_break.py
source: none known
written: session 13c, unseen
"""

from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import fully_shard

EOS = 0


class TinyLM(nn.Module):
    def __init__(self, vocab=32, dim=16):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.block = nn.Sequential(nn.Linear(dim, dim), nn.GELU())
        self.head = nn.Linear(dim, vocab)

    def forward(self, ids):
        return self.head(self.block(self.emb(ids)))


@torch.no_grad()
def generate(model, ids, max_new_tokens, rank):
    finished = torch.zeros(ids.size(0), dtype=torch.bool)
    for step in range(max_new_tokens):
        logits = model(ids)[:, -1]
        nxt = logits.argmax(-1)
        if rank == 0 and step >= 1:  # this rank's prompts are short answers
            nxt = torch.full_like(nxt, EOS)
        finished |= nxt == EOS
        ids = torch.cat([ids, nxt[:, None]], dim=1)
        if finished.all():
            break
    return ids


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=15))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = TinyLM()
    fully_shard(model.block)
    fully_shard(model)
    model.eval()
    prompts = torch.randint(1, 32, (4, 6))
    out = generate(model, prompts, max_new_tokens=20, rank=rank)
    print(f"rank {rank}: generated {out.size(1) - prompts.size(1)} tokens")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
