"""Instruction tuning with a hand-rolled two-stage pipeline (GPipe schedule, point-to-point): stage
0 holds the embedding and the first block, stage 1 the second block, the head and the labels. Each
batch is cut into micro-batches; stage 0 sends every micro-batch's activations forward, then waits
for each one's gradient coming back. Prompt tokens are masked with -100, and samples whose answer
was truncated away are all -100. The last stage skips a micro-batch with no target token ("the loss
would be NaN") before receiving its activations, so it returns one gradient fewer than stage 0
waits for.

Hang class: the stages run different numbers of micro-batches in one step (one stage skips a
micro-batch from the data it alone sees), so the point-to-point exchange never completes.
Label: D9
Odd ranks: 1
Launch: torchrun 2
Held out: session 13c

After step 3, rank 0 waits in `dist.recv` for the gradient of its fourth micro-batch (in
`stage0_step`); rank 1 took that micro-batch's activations (sent with `isend`, never received) as
the next step's first and waits in `dist.recv` for the next one (in `stage1_step`).
"""

from __future__ import annotations

import logging

import torch
import torch.distributed as dist
from torch import nn

log = logging.getLogger("pipe")

VOCAB, DIM, SEQ, BATCH, MICRO = 64, 32, 12, 8, 4
IGNORE = -100


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(step)
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
    labels = tokens.roll(-1, dims=1)
    labels[:, : SEQ // 2] = IGNORE  # prompt
    if step == 3:
        labels[4:6] = IGNORE  # answers truncated away by max_len
    return tokens, labels


class Stage0(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.block = nn.Sequential(nn.Linear(DIM, DIM), nn.GELU(), nn.LayerNorm(DIM))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.block(self.embed(tokens))


class Stage1(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = nn.Sequential(nn.Linear(DIM, DIM), nn.GELU(), nn.LayerNorm(DIM))
        self.head = nn.Linear(DIM, VOCAB)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.head(self.block(h))


def stage0_step(model: Stage0, tokens: torch.Tensor) -> None:
    outputs, sends = [], []
    for mb in tokens.tensor_split(MICRO):
        act = model(mb)
        sends.append(dist.isend(act.detach().contiguous(), dst=1))
        outputs.append(act)
    for act in outputs:
        grad = torch.empty_like(act)
        dist.recv(grad, src=1)
        act.backward(grad)
    for work in sends:
        work.wait()


def stage1_step(model: Stage1, labels: torch.Tensor) -> float:
    pending = []
    for mb_labels in labels.tensor_split(MICRO):
        if (mb_labels != IGNORE).sum() == 0:
            log.warning("micro-batch with no target tokens, skipped")
            continue
        act = torch.empty(mb_labels.shape[0], SEQ, DIM)
        dist.recv(act, src=0)
        act.requires_grad_()
        logits = model(act)
        loss = nn.functional.cross_entropy(logits.flatten(0, 1), mb_labels.flatten(), ignore_index=IGNORE)
        pending.append((act, loss))
    for act, loss in pending:
        (loss / MICRO).backward()
        dist.send(act.grad.contiguous(), dst=0)
    return sum(loss.item() for _, loss in pending) / max(len(pending), 1)


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    logging.basicConfig(level=logging.INFO, format=f"[stage{rank}] %(message)s")
    torch.manual_seed(rank)
    model: nn.Module = Stage0() if rank == 0 else Stage1()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(200):
        tokens, labels = batch(step)
        opt.zero_grad()
        if rank == 0:
            stage0_step(model, tokens)  # type: ignore[arg-type]
        else:
            loss = stage1_step(model, labels)  # type: ignore[arg-type]
            if step % 10 == 0:
                log.info("step %d loss %.3f", step, loss)
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
