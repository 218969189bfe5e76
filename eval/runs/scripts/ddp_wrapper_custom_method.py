"""mistake: after wrapping the model in DDP, the sampling loop calls the model's own method
`model.generate(...)` on the wrapper; DDP forwards only forward(), so every rank raises an
AttributeError.
label: none
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/ddp_wrapper_custom_method.py
source: https://github.com/huggingface/accelerate/issues/109
written: session 10, unseen
"""

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


class TinyLM(nn.Module):
    def __init__(self, vocab=50, dim=32):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.out = nn.Linear(dim, vocab)

    def forward(self, ids):
        return self.out(self.emb(ids))

    @torch.no_grad()
    def generate(self, ids, steps=5):
        for _ in range(steps):
            nxt = self(ids)[:, -1].argmax(-1, keepdim=True)
            ids = torch.cat([ids, nxt], dim=1)
        return ids


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = DDP(TinyLM())
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    ids = torch.randint(0, 50, (4, 12))
    loss = nn.functional.cross_entropy(model(ids[:, :-1]).flatten(0, 1), ids[:, 1:].flatten())
    loss.backward()
    opt.step()
    print(f"rank {rank} loss {loss.item():.3f}", flush=True)
    sample = model.generate(ids[:1, :3])
    print(sample.tolist())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
