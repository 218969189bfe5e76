"""mistake: knowledge distillation with the teacher kept as a submodule of the student model: its
forward runs the teacher under `torch.no_grad()`, but the teacher's parameters still have
requires_grad=True, so under DDP (default settings, no find_unused_parameters) they never get a
gradient and the second iteration finds the reduction unfinished. Launched with
`python -m torch.distributed.run`.
label: D8
first_rank: none
launch: python -m torch.distributed.run --nproc-per-node 2 eval/runs/scripts/ddp_frozen_teacher_no_grad.py
source: https://discuss.pytorch.org/t/ddp-knowledge-distillation-teacher-model-expected-to-have-finished-reduction/
written: session 11c, unseen
"""

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


class Distiller(nn.Module):
    def __init__(self):
        super().__init__()
        self.teacher = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 10))
        self.student = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 10))

    def forward(self, x):
        with torch.no_grad():
            t_logits = self.teacher(x)
        s_logits = self.student(x)
        return s_logits, t_logits


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = DDP(Distiller())
    opt = torch.optim.SGD(model.module.student.parameters(), lr=0.01)
    for step in range(5):
        x = torch.randn(8, 16)
        s, t = model(x)
        loss = F.kl_div(F.log_softmax(s, -1), F.softmax(t / 2.0, -1), reduction="batchmean")
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0:
            print(f"step {step} kd loss {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
