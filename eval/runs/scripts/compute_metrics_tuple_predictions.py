"""mistake: a hand-written Trainer-style evaluation collects the model's outputs into
`EvalPrediction(predictions=..., label_ids=...)` and calls a `compute_metrics` copied from a Hugging Face
example, `preds = eval_pred.predictions.argmax(-1)`; the model returns `(logits, hidden)`, so the predictions
are a tuple and every rank fails in compute_metrics (`python -m torch.distributed.run --tee 3`).
label: none
first_rank: none
launch: python -m torch.distributed.run --tee 3 --nproc-per-node 2 eval/runs/scripts/compute_metrics_tuple_predictions.py
source: none known
written: session 13, unseen
"""

from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


@dataclass
class EvalPrediction:
    predictions: object
    label_ids: np.ndarray


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Linear(16, 32)
        self.head = nn.Linear(32, 3)

    def forward(self, x):
        hidden = torch.tanh(self.encoder(x))
        return self.head(hidden), hidden


def compute_metrics(eval_pred):
    preds = eval_pred.predictions.argmax(-1)
    return {"accuracy": float((preds == eval_pred.label_ids).mean())}


def evaluate(model, batches):
    logits, hiddens, labels = [], [], []
    model.eval()
    with torch.no_grad():
        for x, y in batches:
            out = model(x)
            logits.append(out[0].numpy())
            hiddens.append(out[1].numpy())
            labels.append(y.numpy())
    preds = (np.concatenate(logits), np.concatenate(hiddens))
    return compute_metrics(EvalPrediction(predictions=preds, label_ids=np.concatenate(labels)))


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = DDP(Classifier())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    train = [(torch.randn(8, 16), torch.randint(0, 3, (8,))) for _ in range(4)]
    for step, (x, y) in enumerate(train):
        logits, _ = model(x)
        loss = nn.functional.cross_entropy(logits, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0:
            print(f"{{'loss': {loss.item():.4f}, 'step': {step}}}", flush=True)
    metrics = evaluate(model, train[:2])
    if rank == 0:
        print(metrics, flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
