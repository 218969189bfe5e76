"""mistake: the model returns a dict with a main and an auxiliary output; the training loop only
puts the main output in the loss, so the auxiliary head gets no gradient under DDP (default
settings, no find_unused_parameters).
label: D8
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/ddp_dict_outputs_unused.py
source: none known
"""

import logging

import torch
import torch.distributed as dist
import torch.nn as nn

log = logging.getLogger("trainer")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(20, 32), nn.ReLU())
        self.cls = nn.Linear(32, 5)
        self.aux = nn.Linear(32, 5)

    def forward(self, x):
        h = self.backbone(x)
        return {"logits": self.cls(h), "aux_logits": self.aux(h)}


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s [rank {rank}] %(message)s")
    model = nn.parallel.DistributedDataParallel(Net())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    crit = nn.CrossEntropyLoss()
    for step in range(5):
        x, y = torch.randn(16, 20), torch.randint(0, 5, (16,))
        out = model(x)
        loss = crit(out["logits"], y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        log.info("step %d loss %.4f", step, loss.item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
