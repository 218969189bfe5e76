"""Mechanisms that session 10's unseen scripts needed (eval/lint/README.md, "Session 10"), each on its
own, quoting the real code of a train-split file. Each test shows the finding appear for the real
idiom's neighbour and go away for the real idiom."""

from __future__ import annotations

import pytest

from tests.core.lint import test_lint_unseen_idioms as unseen
from triage.core.lint.rank_terms import main_decorator

HEAD = "import os\nimport torch\nimport torch.distributed as dist\n"


def codes(body: str) -> list[str]:
    return unseen.codes(body, HEAD)


# Vision-CAIR/MiniGPT-4 minigpt4/runners/runner_base.py (LAVIS's runner): the checkpoint is written
# in a method decorated `@main_process` (dist_utils: `if rank == 0: return func(...)`).
RUNNER = """
    from minigpt4.common.dist_utils import get_rank, main_process

    class RunnerBase:
        def train(self):
            dist.init_process_group("nccl")
            for cur_epoch in range(10):
                self._save_checkpoint(cur_epoch, is_best=False)

        @main_process
        def _save_checkpoint(self, cur_epoch, is_best=False):
            save_to = os.path.join(
                self.output_dir,
                "checkpoint_{}.pth".format("best" if is_best else cur_epoch),
            )
            torch.save({"epoch": cur_epoch}, save_to)

    if __name__ == "__main__":
        RunnerBase().train()
"""


def test_a_method_decorated_main_process_writes_on_rank_0_only() -> None:
    assert "TRG023" not in codes(RUNNER)
    assert "TRG023" in codes(RUNNER.replace("        @main_process\n", ""))
    # A decorator that says nothing of the main process gates nothing.
    assert "TRG023" in codes(RUNNER.replace("@main_process", "@torch.no_grad()"))


@pytest.mark.parametrize(
    ("name", "gates"),
    [
        ("main_process", True),  # LAVIS, BLIP, MiniGPT-4
        ("on_main_process", True),
        ("rank_0_only", True),
        ("master_only", True),
        ("rank_zero_only", True),
        ("main", False),  # a bare `@main` (click, hydra entry points)
        ("master", False),
        ("main_process_first", False),  # a context manager: every rank runs it, in turn
    ],
)
def test_which_decorator_names_keep_a_function_to_the_main_process(name: str, gates: bool) -> None:
    assert main_decorator(name) is gates
