"""mistake: the pretrained weights are loaded on rank 0 only before wrapping in DDP ("DDP broadcasts
them anyway"), and the checkpoint's embedding has a larger vocabulary, so rank 0 resizes its
embedding to match while rank 1 keeps the configured size.
label: E20
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/ddp_ckpt_rank0_before_wrap.py
source: none known
written: session 9, unseen
"""

import torch
import torch.distributed as dist
import torch.nn as nn


class Classifier(nn.Module):
    def __init__(self, vocab):
        super().__init__()
        self.embed = nn.Embedding(vocab, 16)
        self.fc = nn.Linear(16, 3)

    def forward(self, ids):
        return self.fc(self.embed(ids).mean(1))


def load_pretrained(model, state):
    if state["embed.weight"].shape != model.embed.weight.shape:
        model.embed = nn.Embedding(*state["embed.weight"].shape)
    model.load_state_dict(state)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = Classifier(vocab=1000)
    if rank == 0:
        load_pretrained(model, Classifier(vocab=1024).state_dict())
    model = nn.parallel.DistributedDataParallel(model)
    print(f"rank {rank} wrapped", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
