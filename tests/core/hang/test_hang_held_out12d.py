"""The hang analysis on the real stacks of session 12d's held-out hung jobs (eval/hangs/x_*.py, read
by bench/bench_hang_unseen.py --dump): py-spy's dumps of every rank that runs, torch 2.13, gloo."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.core.hang.test_hang_held_out12 import _variant
from tests.core.hang.test_hang_unseen_stacks import _job, _says


def test_a_rank_out_of_a_while_true_through_its_own_clock_test_left_on_its_own_decision() -> None:
    """`while True:` with `if time.monotonic() - start > BUDGET_S: break` (each rank's own clock):
    rank 1 waits in the barrier after the loop, rank 0 in the all_reduce of `for p in
    model.parameters()` inside it (read D21 before: a loop over parameters rank 1 did not enter)."""
    picture = _job("x_d19_wallclock_budget_break", "python")
    assert [d.entry for d in picture.diagnoses][:2] == ["D19", "D9"], _says(picture)
    assert picture.suspect_ranks == (1,)
    assert "`break` at line 45" in picture.diagnoses[0].evidence[0]


def test_a_break_out_of_a_loop_over_the_data_is_still_the_end_of_the_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _variant(tmp_path, monkeypatch, "x_d19_wallclock_budget_break", 43, "for batch in loader:")
    picture = _job("x_d19_wallclock_budget_break", "python")
    assert picture.diagnoses[0].entry == "D9" and picture.suspect_ranks == (1,), _says(picture)


def test_a_loop_with_no_guarded_jump_is_not_left_by_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _variant(tmp_path, monkeypatch, "x_d19_wallclock_budget_break", 45, "pass")
    picture = _job("x_d19_wallclock_budget_break", "python")
    assert "left the loop on a decision" not in picture.verdict, _says(picture)


def test_a_collective_in_a_logging_filter_runs_only_where_the_level_lets_the_record_through() -> None:
    """Rank 0 waits in an all_reduce inside `GlobalRateFilter.filter`, called by `logging` from
    `log.info(...)`; rank 1 (its logger at WARNING) went past that line to the barrier (read D19
    with no odd rank before: the ranks' sequences diverged)."""
    picture = _job("x_d21_logging_filter_global_rate", "python")
    assert [d.entry for d in picture.diagnoses][:2] == ["D21", "D19"], _says(picture)
    assert picture.suspect_ranks == (0,)
    assert "GlobalRateFilter.filter()" in picture.diagnoses[0].evidence[0]
    assert "log.info" in picture.diagnoses[0].evidence[0]


def test_a_function_called_by_name_on_the_line_is_no_library_callback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _variant(tmp_path, monkeypatch, "x_d21_logging_filter_global_rate", 60, "rate.filter(None)")
    picture = _job("x_d21_logging_filter_global_rate", "python")
    assert "callback" not in picture.verdict, _says(picture)


@pytest.mark.parametrize(
    ("job", "launcher", "entry", "odd"),
    [
        ("x_d9_trainer_evaluate_batch_gather", "torchrun", "D9", (1,)),
        ("x_d21_sharded_clip_main_only", "torchrun", "D21", (0,)),
        ("x_d21_extra_repr_global_numel", "script", "D21", (0,)),
        ("x_mn3_rank0_save_slow_mount", "script", "MN3", (0,)),
        ("x_p8_resume_prompt_readline", "torchrun", "P8", (0,)),
    ],
)
def test_the_batch_s_jobs_read_right_before_any_change_stay_right(
    job: str, launcher: str, entry: str, odd: tuple[int, ...]
) -> None:
    picture = _job(job, launcher)
    assert picture.diagnoses[0].entry == entry and picture.suspect_ranks == odd, _says(picture)
