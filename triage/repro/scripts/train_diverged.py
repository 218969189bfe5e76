"""D20: rank 1 hits a NaN at step 3 and raises; rank 0 is left waiting in the next all-reduce.
Where rank 1 raises comes from TRIAGE_REPRO_HOW:

- `forward` (the default): the training loop checks the loss and raises;
- `backward`: a custom autograd Function refuses a non-finite gradient inside loss.backward(),
  while rank 0 waits in DDP's gradient all-reduce.
"""

import datetime
import os
from typing import Any

import torch
import torch.distributed as dist


class CheckedScale(torch.autograd.Function):
    """Scales its input; refuses a non-finite gradient on the way back."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, poison: bool) -> torch.Tensor:
        ctx.poison = poison
        return x * 2.0

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        if ctx.poison:
            grad = grad * float("nan")
        if not torch.isfinite(grad).all():
            raise RuntimeError("non-finite gradient in CheckedScale.backward")
        return grad * 2.0, None


def main() -> None:
    """Run this reproduction as one rank of the job."""
    in_backward = os.environ.get("TRIAGE_REPRO_HOW", "forward") == "backward"
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank = dist.get_rank()
    torch.manual_seed(rank)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(8):
        bad = rank == 1 and step == 3  # one shard hit a bad sample
        out = model(torch.randn(4, 8))
        if in_backward:
            out = CheckedScale.apply(out, bad)  # type: ignore[no-untyped-call]
        loss = out.pow(2).mean()
        if bad and not in_backward:
            raise FloatingPointError(f"loss is nan at step {step}")
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"rank {rank} step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
