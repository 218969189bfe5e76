"""A tabular trainer that evaluates "off the critical path": each rank starts an `EvalWorker`
process (multiprocessing, fork context, not a daemon, because daemons may not start DataLoader
workers of their own) and hands it snapshots through a queue. `Trainer.close()` sends the stop
sentinel, but it is only reached at the normal end of `fit()`, not in a `finally`. When a rank
raises, its traceback is printed and the interpreter's exit hook (multiprocessing's
`_exit_function`) joins the non-daemon worker, which waits on its queue for ever.

Hang class: one rank crashed (traceback printed) but its process never exits, so the others wait
for it in the next collective and the launcher never notices.
Label: D20
Odd ranks: 1
Launch: torchrun 2
Held out: session 13b

Rank 1 raises `ValueError` on a malformed row at step 5 (its shard holds it); its main thread
waits in `_exit_function` joining the eval worker; rank 0 waits in the gradient all_reduce.
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing as mp
import os
import queue
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

log = logging.getLogger("tabular")


@dataclass
class Config:
    epochs: int = 5
    rows_per_rank: int = 64
    batch_size: int = 8
    columns: int = 10
    lr: float = 1e-2
    eval_every: int = 3


def load_rows(rank: int, n: int, columns: int) -> list[list[str]]:
    """Rows as the CSV reader gives them: strings. Rank 1's shard has one bad label."""
    g = torch.Generator().manual_seed(rank)
    rows = []
    for i in range(n):
        feats = [f"{v:.4f}" for v in torch.randn(columns, generator=g).tolist()]
        label = "n/a" if (rank == 1 and i == 44) else str(int(i % 3 == 0))
        rows.append(feats + [label])
    return rows


def parse(rows: list[list[str]]) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.tensor([[float(v) for v in r[:-1]] for r in rows])
    y = torch.tensor([float(r[-1]) for r in rows])  # ValueError on "n/a"
    return x, y


class TabularNet(nn.Module):
    def __init__(self, columns: int) -> None:
        super().__init__()
        self.bn = nn.BatchNorm1d(columns)
        self.body = nn.Sequential(
            nn.Linear(columns, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 16), nn.ReLU()
        )
        self.head = nn.Linear(16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(self.bn(x))).squeeze(-1)


def eval_worker(inbox: mp.Queue, outbox: mp.Queue, rank: int) -> None:
    """Runs in its own process: scores each snapshot it is given until it gets None."""
    outbox.put(("ready", os.getpid()))
    g = torch.Generator().manual_seed(1000 + rank)
    x = torch.randn(32, Config.columns, generator=g)
    while True:
        item = inbox.get()
        if item is None:
            return
        step, state = item
        model = TabularNet(len(state["bn.weight"]))
        model.load_state_dict(state)
        model.eval()
        with torch.no_grad():
            outbox.put(("score", step, torch.sigmoid(model(x)).mean().item()))


class Trainer:
    def __init__(self, cfg: Config, rank: int) -> None:
        self.cfg, self.rank = cfg, rank
        torch.manual_seed(0)
        self.model = TabularNet(cfg.columns)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=cfg.lr, momentum=0.9)
        self.rows = load_rows(rank, cfg.rows_per_rank, cfg.columns)
        ctx = mp.get_context("fork")
        self.inbox: mp.Queue = ctx.Queue(maxsize=4)
        self.outbox: mp.Queue = ctx.Queue()
        self.evaluator = ctx.Process(target=eval_worker, args=(self.inbox, self.outbox, rank), daemon=False)
        self.evaluator.start()
        kind, pid = self.outbox.get(timeout=300)  # the evaluator is up before the first step
        log.info("eval worker %s (pid %d)", kind, pid)
        self.step = 0

    def _drain_scores(self) -> None:
        while True:
            try:
                _, step, score = self.outbox.get_nowait()
            except queue.Empty:
                return
            log.info("eval score at step %d: %.4f", step, score)

    def batches(self):
        for i in range(0, len(self.rows), self.cfg.batch_size):
            yield parse(self.rows[i : i + self.cfg.batch_size])

    def _sync(self) -> None:
        for p in self.model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= dist.get_world_size()

    def _maybe_eval(self) -> None:
        if self.step % self.cfg.eval_every == 0:
            try:
                self.inbox.put_nowait((self.step, {k: v.clone() for k, v in self.model.state_dict().items()}))
            except queue.Full:
                log.warning("eval worker busy, snapshot dropped")

    def fit(self) -> None:
        for epoch in range(self.cfg.epochs):
            for x, y in self.batches():
                self.opt.zero_grad()
                loss = nn.functional.binary_cross_entropy_with_logits(self.model(x), y)
                loss.backward()
                self._sync()
                self.opt.step()
                self.step += 1
                self._maybe_eval()
            self._drain_scores()
            log.info("epoch %d done (step %d)", epoch, self.step)

    def close(self) -> None:
        self.inbox.put(None)
        self.evaluator.join()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=Config.epochs)
    parser.add_argument("--lr", type=float, default=Config.lr)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    logging.basicConfig(level=logging.INFO, format=f"[{rank}] %(asctime)s %(message)s")
    trainer = Trainer(Config(epochs=args.epochs, lr=args.lr), rank)
    trainer.fit()
    trainer.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
