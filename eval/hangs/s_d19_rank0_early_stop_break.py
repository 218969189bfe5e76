"""Early stopping on the validation loss, evaluated on the main process only (the tutorial keeps
validation on rank 0 "to avoid duplicate work"), and the loop left with `break` there.

Hang class: a rank leaves the training loop on a decision only it made; the others train on.
Label: D19
Odd ranks: 0
Launch: torchrun 3
Held out: session 11d

The validation targets are noise, so the loss stops improving after the first epoch; with
`patience = 2` rank 0 breaks out after epoch 2 and waits in the final `dist.barrier()`; ranks 1
and 2 wait in DDP's gradient all-reduce of epoch 3.
"""

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    val_x, val_y = torch.randn(128, 8), torch.randn(128, 1)
    best, bad_epochs, patience = float("inf"), 0, 2
    for epoch in range(100):
        model.train()
        for _ in range(30):
            x = torch.randn(32, 8)
            loss = nn.functional.mse_loss(model(x), x.mean(-1, keepdim=True))
            opt.zero_grad()
            loss.backward()
            opt.step()
        if rank == 0:
            model.eval()
            with torch.no_grad():
                val_loss = nn.functional.mse_loss(model.module(val_x), val_y).item()
            print(f"epoch {epoch} val {val_loss:.4f}", flush=True)
            if val_loss < best - 1e-3:
                best, bad_epochs = val_loss, 0
            else:
                bad_epochs += 1
            if bad_epochs >= patience:
                print("early stopping", flush=True)
                break
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
