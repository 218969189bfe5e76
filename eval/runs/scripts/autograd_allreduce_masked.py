"""mistake: a custom autograd Function for a "global" masked-token loss all-reduces its gradient in
backward (so the scale matches the global token count); the Function is only applied when the
rank's batch holds masked tokens (`if mask.any():`), and at step 2 rank 1's batch has none, so rank 0
waits in the all-reduce inside backward while rank 1 goes on to the step's loss all-reduce (init
timeout 15 s).
label: D21
alternates: D19
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/autograd_allreduce_masked.py
source: none known
written: session 11, unseen
"""

from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn


class GlobalMean(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.n = x.numel()
        return x.mean()

    @staticmethod
    def backward(ctx, grad):
        g = grad.clone()
        dist.all_reduce(g)
        return (g / dist.get_world_size() / ctx.n).expand(ctx.n)


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=15))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Linear(16, 16)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(4):
        x = torch.randn(8, 16)
        mask = torch.rand(8) < 0.3
        mask[step] = True
        if step == 2 and rank == 1:
            mask[:] = False
        out = model(x)
        loss = out.pow(2).mean()
        if mask.any():
            loss = loss + GlobalMean.apply(out[mask].pow(2).sum(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        logged = torch.stack([loss.detach(), mask.sum().float()])
        dist.all_reduce(logged)
        if rank == 0:
            print(f"step {step} loss {logged[0].item() / 2:.4f} masked {int(logged[1])}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
