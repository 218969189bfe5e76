"""The hang analysis on the real stacks of session 13's held-out hung jobs (eval/hangs/y_*.py, read
by bench/bench_hang_unseen.py --dump): py-spy's dumps of every rank that runs, torch 2.13, gloo."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.core.hang.test_hang_held_out12 import _variant
from tests.core.hang.test_hang_unseen_stacks import _job, _says


def test_a_rank_waiting_in_an_interrupt_clause_around_the_loop_stopped_on_its_own() -> None:
    """Rank 1 waits in the checkpoint barrier called from `except KeyboardInterrupt:` of the `try`
    around `for step in range(steps)`, rank 0 in the all_reduce inside that loop (read D9 before:
    out of the loop, so out of batches)."""
    picture = _job("y_d19_interrupt_save_return", "torchrun")
    assert [d.entry for d in picture.diagnoses][:2] == ["D19", "D20"], _says(picture)
    assert picture.suspect_ranks == (1,)
    assert "`except KeyboardInterrupt:` (line 75)" in picture.diagnoses[0].evidence[0]


def test_an_error_clause_around_the_loop_is_a_crash_kept_from_ending_the_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _variant(tmp_path, monkeypatch, "y_d19_interrupt_save_return", 75, "except RuntimeError:")
    picture = _job("y_d19_interrupt_save_return", "torchrun")
    assert [d.entry for d in picture.diagnoses][:2] == ["D20", "D19"], _says(picture)
    assert picture.suspect_ranks == (1,)


def test_a_clause_that_raises_again_is_not_a_way_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _variant(tmp_path, monkeypatch, "y_d19_interrupt_save_return", 78, "raise")
    picture = _job("y_d19_interrupt_save_return", "torchrun")
    assert "through `except" not in picture.verdict, _says(picture)


def test_a_collective_per_parameter_with_a_gradient_is_skipped_where_the_batch_left_one_unused() -> None:
    """Rank 0 waits in the all_reduce under `if p.grad is not None:` of a hand-written gradient
    sync, rank 1 (whose last batch did not use the auxiliary head) in the barrier after the epoch
    (read D21 with rank 0 before: a loop rank 1 passed without entering)."""
    picture = _job("y_d19_manual_grad_sync_unused_head", "script")
    assert [d.entry for d in picture.diagnoses][:2] == ["D19", "D21"], _says(picture)
    assert picture.suspect_ranks == (1,)
    assert "`if p.grad is not None` (line 46, in sync_grads())" in picture.diagnoses[0].evidence[0]


def test_a_test_of_something_else_than_a_gradient_is_not_an_unused_parameter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _variant(tmp_path, monkeypatch, "y_d19_manual_grad_sync_unused_head", 46, "if p.requires_grad:")
    picture = _job("y_d19_manual_grad_sync_unused_head", "script")
    assert "no gradient" not in picture.verdict, _says(picture)


@pytest.mark.parametrize(
    ("job", "launcher", "entry", "odd"),
    [
        ("y_d21_resume_only_rank0_has_ckpt", "python", "D21", (0,)),
        ("y_d21_on_evaluate_callback_reduce", "torchrun", "D21", (0,)),
        ("y_d9_eval_sampler_for_training", "torchrun", "D9", (0,)),
        ("y_mn3_thread_barrier_monitored", "script", "MN3", (1,)),
        ("y_p8_logging_handler_pdb", "torchrun", "P8", (1,)),
        ("y_d20_executor_shutdown_join", "python", "D20", (1,)),
    ],
)
def test_the_batch_s_jobs_read_right_before_any_change_stay_right(
    job: str, launcher: str, entry: str, odd: tuple[int, ...]
) -> None:
    picture = _job(job, launcher)
    assert picture.diagnoses[0].entry == entry and picture.suspect_ranks == odd, _says(picture)
