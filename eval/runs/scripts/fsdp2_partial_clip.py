"""mistake: FSDP2 fully_shard is applied to the transformer blocks only (the root module and its
embedding stay plain tensors), and the loop clips gradients over all parameters.
label: E6
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/fsdp2_partial_clip.py
source: https://github.com/pyg-team/pytorch_geometric/pull/10317
"""

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard


class LM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(100, 32)
        self.blocks = torch.nn.ModuleList(torch.nn.Linear(32, 32) for _ in range(2))
        self.head = torch.nn.Linear(32, 100)

    def forward(self, idx):
        h = self.emb(idx)
        for b in self.blocks:
            h = torch.relu(b(h))
        return self.head(h)


def main():
    dist.init_process_group("gloo")
    model = LM()
    for block in model.blocks:
        fully_shard(block)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(2):
        idx = torch.randint(0, 100, (4, 8))
        loss = torch.nn.functional.cross_entropy(model(idx).flatten(0, 1), idx.flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
    print("trained", dist.get_rank())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
