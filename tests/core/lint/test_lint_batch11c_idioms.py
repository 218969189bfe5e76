"""The mechanism session 11c's train evidence needed (eval/lint/README.md, "Session 11c"), quoting the
real code of a train-split file: the finding appears for the real idiom and goes away for its fix."""

from __future__ import annotations

import textwrap

import pytest

from triage.core.lint import lint_source

HEAD = "from contextlib import nullcontext\nimport torch.distributed as dist\n"


def codes(body: str) -> list[str]:
    return [f.code for f in lint_source(HEAD + textwrap.dedent(body), "trainer.py")]


# modelscope/FunASR d410a565 (#3472): `no_sync` is chosen in the training loop and the step is taken
# in another method, on another micro-batch of the accumulation window.
TRAINER = """
    class Trainer:
        def train_epoch(self, model, optim, dataloader_train):
            accum_grad = self.accum_grad
            for batch_idx, batch in enumerate(dataloader_train):
                my_context = nullcontext
                if self.use_ddp or self.use_fsdp:
                    my_context = model.no_sync if batch_idx % accum_grad != 0 else my_context
                with my_context():
                    loss = model(**batch)
                    loss.backward()
                self.update_step(model, optim, {"batch_idx": batch_idx})

        def update_step(self, model, optim, loss_dict):
            batch_idx = loss_dict["batch_idx"]
            if (batch_idx + 1) % self.accum_grad == 0:
                if self.use_ddp or self.use_fsdp:
                    dist.barrier()
                optim.step()
                optim.zero_grad(set_to_none=True)
"""


def test_a_step_on_another_micro_batch_than_the_one_no_sync_spares_is_an_error() -> None:
    assert "TRG053" in codes(TRAINER)
    fixed = TRAINER.replace("batch_idx % accum_grad != 0", "(batch_idx + 1) % accum_grad != 0")
    assert "TRG053" not in codes(fixed)


@pytest.mark.parametrize(
    "choice",
    [
        "model.no_sync if (batch_idx + 1) % accum_grad else my_context",  # not a comparison: not read
        "my_context if (batch_idx + 1) % accum_grad == 0 else model.no_sync",  # the sync arm first
    ],
)
def test_other_spellings_of_the_right_choice_are_not_reported(choice: str) -> None:
    body = TRAINER.replace("model.no_sync if batch_idx % accum_grad != 0 else my_context", choice)
    assert "TRG053" not in codes(body)


def test_a_step_counted_by_another_counter_is_not_compared() -> None:
    body = TRAINER.replace("(batch_idx + 1) % self.accum_grad == 0", "(self.step + 1) % self.accum_grad == 0")
    assert "TRG053" not in codes(body)
