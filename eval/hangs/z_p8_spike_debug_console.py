"""A seq2seq-style trainer with a home-made "debug console": when the `SpikeMonitor` sees the loss
jump above `spike_factor` times its running mean, `Trainer._on_spike()` opens a `cmd.Cmd` shell
(`stats`, `lr 1e-4`, `skip`, `continue`) so the author can poke at the run, as they did on their
workstation. Under a launcher the prompt is on one rank's (shared) stdin, nobody answers it.

Hang class: an interactive prompt on one rank under a multi-process launcher (a debugger-like
shell built on `cmd`), the others wait in the next collective.
Label: P8
Odd ranks: 1
Launch: torchrun 2
Held out: session 13b

Rank 1's ninth batch is an outlier: its monitor fires and it waits in `cmdloop()` reading stdin;
rank 0 waits in the all_reduce of the next step's gradients.
"""

from __future__ import annotations

import argparse
import cmd
import logging
import math
from collections import deque
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

log = logging.getLogger("s2s")


@dataclass
class Hparams:
    steps: int = 100
    batch_size: int = 8
    src_len: int = 10
    vocab: int = 40
    dim: int = 32
    lr: float = 2e-3
    spike_factor: float = 3.0
    window: int = 5
    console: bool = True


class SpikeMonitor:
    def __init__(self, window: int, factor: float) -> None:
        self.recent: deque[float] = deque(maxlen=window)
        self.factor = factor

    def update(self, loss: float) -> bool:
        full = len(self.recent) == self.recent.maxlen
        spike = full and loss > self.factor * (sum(self.recent) / len(self.recent))
        self.recent.append(loss)
        return spike


class DebugConsole(cmd.Cmd):
    intro = "loss spike: type `stats`, `lr VALUE`, `skip` or `continue`"
    prompt = "(train) "

    def __init__(self, trainer: "Trainer") -> None:
        super().__init__()
        self.trainer = trainer

    def do_stats(self, _: str) -> None:
        print(f"step {self.trainer.step} recent {list(self.trainer.monitor.recent)}")

    def do_lr(self, value: str) -> None:
        for group in self.trainer.opt.param_groups:
            group["lr"] = float(value)

    def do_skip(self, _: str) -> bool:
        self.trainer.skip_next = True
        return True

    def do_continue(self, _: str) -> bool:
        return True


class Seq2Seq(nn.Module):
    def __init__(self, vocab: int, dim: int) -> None:
        super().__init__()
        self.src_emb = nn.Embedding(vocab, dim)
        self.encoder = nn.LSTM(dim, dim, batch_first=True)
        self.decoder = nn.LSTM(dim, dim, batch_first=True)
        self.proj = nn.Linear(dim, vocab)
        self.length_head = nn.Linear(dim, 1)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        _, state = self.encoder(self.src_emb(src))
        out, _ = self.decoder(self.src_emb(tgt), state)
        return self.proj(out), self.length_head(state[0][-1]).squeeze(-1)


class Trainer:
    def __init__(self, hp: Hparams) -> None:
        self.hp = hp
        self.rank = dist.get_rank()
        torch.manual_seed(0)
        self.model = Seq2Seq(hp.vocab, hp.dim)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=hp.lr)
        self.monitor = SpikeMonitor(hp.window, hp.spike_factor)
        self.step = 0
        self.skip_next = False
        self.gen = torch.Generator().manual_seed(self.rank)

    def _batch(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        src = torch.randint(0, self.hp.vocab, (self.hp.batch_size, self.hp.src_len), generator=self.gen)
        tgt = src.flip(1)
        length = torch.full((self.hp.batch_size,), float(self.hp.src_len))
        if self.rank == 1 and self.step == 8:
            length[0] = 512.0  # a record whose length field is corrupt
        return src, tgt, length

    def _reduce_grads(self) -> None:
        for p in self.model.parameters():
            dist.all_reduce(p.grad)
            p.grad.mul_(1.0 / dist.get_world_size())

    def _on_spike(self, loss: float) -> None:
        log.warning("loss spike %.3f at step %d", loss, self.step)
        if self.hp.console:
            DebugConsole(self).cmdloop()

    def _log_step(self, loss: float) -> None:
        if self.monitor.update(loss):
            self._on_spike(loss)
        elif self.step % 10 == 0:
            log.info("step %d loss %.3f ppl %.1f", self.step, loss, math.exp(min(loss, 20)))

    def train(self) -> None:
        self.model.train()
        while self.step < self.hp.steps:
            src, tgt, length = self._batch()
            logits, length_pred = self.model(src, tgt[:, :-1])
            loss = nn.functional.cross_entropy(logits.reshape(-1, self.hp.vocab), tgt[:, 1:].reshape(-1))
            loss = loss + 0.01 * nn.functional.mse_loss(length_pred, length)
            self.opt.zero_grad()
            loss.backward()
            self._reduce_grads()
            if not self.skip_next:
                self.opt.step()
            self.skip_next = False
            self._log_step(loss.item())
            self.step += 1


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=Hparams.steps)
    parser.add_argument("--no-console", action="store_true", help="never open the debug console")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    logging.basicConfig(level=logging.INFO, format=f"rank{dist.get_rank()} %(message)s")
    Trainer(Hparams(steps=args.steps, console=not args.no_console)).train()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
