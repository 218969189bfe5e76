"""A hand-written `Accelerator`-like wrapper (is_main_process, wait_for_everyone, save) in the
style of the Hugging Face examples. The end-of-epoch block follows the docs' "save on the main
process" recipe, but the `wait_for_everyone()` meant to come before it was put inside the
`if accelerator.is_main_process:` block, next to the save.

Hang class: a barrier reached only by the main process (rank-conditional collective, through a
wrapper's method).
Label: D21
Odd ranks: 0
Launch: torchrun 2
Held out: session 12c

At the end of epoch 0 rank 0 waits in the barrier inside `Accelerator.wait_for_everyone`; rank 1
goes on to epoch 1 and waits in the gradient all-reduce inside `Accelerator.backward`.
"""

import os
import tempfile

import torch
import torch.distributed as dist
from torch import nn


class Accelerator:
    def __init__(self) -> None:
        dist.init_process_group("gloo")
        self.process_index = dist.get_rank()
        self.num_processes = dist.get_world_size()

    @property
    def is_main_process(self) -> bool:
        return self.process_index == 0

    def wait_for_everyone(self) -> None:
        if self.num_processes > 1:
            dist.barrier()

    def backward(self, loss: torch.Tensor, model: nn.Module) -> None:
        loss.backward()
        for p in model.parameters():
            if p.grad is not None:
                dist.all_reduce(p.grad)
                p.grad /= self.num_processes

    def save(self, obj: dict, path: str) -> None:
        torch.save(obj, path)

    def print(self, *args: object) -> None:
        if self.is_main_process:
            print(*args, flush=True)


def main() -> None:
    accelerator = Accelerator()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    data = [(torch.randn(16, 32), torch.randint(0, 10, (16,))) for _ in range(20)]
    out = os.path.join(tempfile.gettempdir(), f"w_accel_{os.environ.get('MASTER_PORT', '0')}")
    for epoch in range(5):
        for x, y in data:
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            accelerator.backward(loss, model)
            opt.step()
        accelerator.print(f"epoch {epoch} loss {loss.item():.3f}")
        if accelerator.is_main_process:
            accelerator.wait_for_everyone()
            accelerator.save(model.state_dict(), out + f"_epoch{epoch}.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
