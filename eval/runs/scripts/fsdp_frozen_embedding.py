"""mistake: the pretrained embedding is frozen (`requires_grad_(False)`) for fine-tuning and the
model is wrapped whole in FSDP (FSDP1, default use_orig_params=False, CPU/gloo), which flattens the
frozen and the trainable parameters of one unit into one FlatParameter.
label: E15
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/fsdp_frozen_embedding.py
source: none known
written: session 10b, unseen
"""

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


class Classifier(nn.Module):
    def __init__(self, vocab=100, dim=16, classes=3):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.encoder = nn.Sequential(nn.Linear(dim, dim), nn.ReLU())
        self.head = nn.Linear(dim, classes)

    def forward(self, ids):
        return self.head(self.encoder(self.embed(ids).mean(1)))


def main():
    dist.init_process_group("gloo")
    model = Classifier()
    model.embed.requires_grad_(False)  # keep the pretrained vectors
    model = FSDP(model, device_id=torch.device("cpu"))
    opt = torch.optim.AdamW((p for p in model.parameters() if p.requires_grad), lr=1e-3)
    for step in range(3):
        ids = torch.randint(0, 100, (4, 7))
        loss = nn.functional.cross_entropy(model(ids), torch.randint(0, 3, (4,)))
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"step {step} loss {loss.item():.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
