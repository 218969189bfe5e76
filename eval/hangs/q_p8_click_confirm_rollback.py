"""On a loss spike the main process asks the operator whether to roll back to the last checkpoint
(`click.confirm`, as an interactive research script does), then tells the other ranks the answer.

Hang class: one rank waits at a library's interactive prompt on a terminal nobody types in, while
the others wait in the broadcast of the answer.
Label: P8
Odd ranks: 0
Launch: torchrun 2
Held out: session 11b

The loss is made to spike at step 40 (a batch of outliers). Rank 0 calls `click.confirm(...)`,
which reads standard input under torchrun (the launcher's stdin, open and silent); rank 1 waits in
`dist.broadcast_object_list` for the decision.
"""

import click
import torch
import torch.distributed as dist
from torch import nn


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    running = None
    for step in range(500):
        x = torch.randn(16, 8) * (50.0 if step == 40 else 1.0)
        loss = (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        opt.step()
        opt.zero_grad()
        value = loss.item()
        if running is not None and value > 10 * running:
            answer = [False]
            if rank == 0:
                answer[0] = click.confirm(f"loss spiked to {value:.1f} at step {step}; roll back?")
            dist.broadcast_object_list(answer, src=0)
            if answer[0]:
                break
        running = value if running is None else 0.9 * running + 0.1 * value
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
