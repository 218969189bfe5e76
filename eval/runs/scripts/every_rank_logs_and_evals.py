"""mistake: nothing is guarded by the rank: every rank prints the progress bar, runs the full
evaluation and writes the same results file, so the terminal shows everything four times.
label: D23
first_rank: none
launch: torchrun --nproc-per-node 4 eval/runs/scripts/every_rank_logs_and_evals.py
source: none known
"""

import json
import os
import tempfile

import torch
import torch.distributed as dist
import torch.nn as nn


def bar(epoch, i, n, loss):
    filled = int(30 * i / n)
    print(f"Epoch {epoch}: {100 * i // n:3d}%|{'█' * filled}{' ' * (30 - filled)}| {i}/{n} [loss={loss:.3f}]", flush=True)


def evaluate(model):
    x = torch.randn(64, 10)
    return {"val_loss": float(model(x).pow(2).mean())}


def main():
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(nn.Linear(10, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    n = 4
    for epoch in range(2):
        for i in range(1, n + 1):
            loss = model(torch.randn(8, 10)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            bar(epoch, i, n, loss.item())
        metrics = evaluate(model)
        print(f"Evaluation epoch {epoch}: {metrics}", flush=True)
        out = os.path.join(tempfile.gettempdir(), "results_epoch.json")
        with open(out, "w") as f:
            json.dump(metrics, f)
        print(f"Saved results to {out}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
