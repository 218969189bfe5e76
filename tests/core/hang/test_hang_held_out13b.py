"""The hang analysis on the real stacks of session 13b's held-out hung jobs (eval/hangs/z_*.py, read
by bench/bench_hang_unseen.py --dump): py-spy's dumps of every rank that runs, torch 2.13, gloo."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.core.hang.test_hang_held_out12 import _variant
from tests.core.hang.test_hang_unseen_stacks import _job, _rank, _says
from triage.core.hang.classify import classify
from triage.core.hang.source_context import line_context


def test_a_retry_decorator_around_a_collective_issues_it_again_on_the_rank_that_raised() -> None:
    """Rank 1 waits in the barrier of `check_step()`, called again by the `@retry` wrapper whose
    `except` re-raises only on the last attempt; ranks 0 and 2 wait in the gradient all_reduce
    (read D21 before: the wrapper, named differently from the line's call, passed for a library
    callback)."""
    picture = _job("z_d19_retry_decorator_barrier", "python")
    assert [d.entry for d in picture.diagnoses][:2] == ["D19", "D21"], _says(picture)
    assert picture.suspect_ranks == (1,)
    assert "retry loop (`for attempt in range(1, times + 1)`" in picture.diagnoses[0].evidence[0]


def test_a_handler_that_always_raises_again_is_no_retry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _variant(tmp_path, monkeypatch, "z_d19_retry_decorator_barrier", 47, "with log_context():")
    picture = _job("z_d19_retry_decorator_barrier", "python")
    assert "retry loop" not in picture.verdict, _says(picture)
    # the wrapper is called straight from `norm = self.check_step()`: no library callback either
    assert "callback" not in picture.verdict, _says(picture)


@pytest.mark.parametrize(
    ("handler", "swallows"),
    [
        ("        if attempt == tries:\n            raise\n        time.sleep(1)", True),
        ("        raise", False),
        ("        log(err)\n        raise RuntimeError('again') from err", False),
        ("        if fatal(err):\n            raise\n        else:\n            raise ValueError", False),
        ("        with lock:\n            raise", False),
        ("        pass", True),
    ],
)
def test_a_handler_swallows_unless_every_path_through_it_raises(handler: str, swallows: bool) -> None:
    source = f"for attempt in range(3):\n    try:\n        step()\n    except OSError as err:\n{handler}\n"
    assert (line_context(source, 3).swallowed is not None) is swallows


def test_a_rank_at_the_exit_joining_a_child_process_has_ended() -> None:
    """Rank 1 raised on a malformed row; its interpreter's exit (multiprocessing's `_exit_function`)
    joins the non-daemon eval process, which waits on its queue; rank 0 waits in the all_reduce
    (read MN3 before: a rank waiting outside any collective)."""
    state = classify(_rank("z_d20_eval_process_joined_at_exit", 1, 2))
    assert state.kind == "exited" and "non-daemon child process" in state.detail, state
    picture = _job("z_d20_eval_process_joined_at_exit", "torchrun")
    assert [d.entry for d in picture.diagnoses][:2] == ["D20", "MN3"], _says(picture)
    assert picture.suspect_ranks == (1,)


def test_a_cmd_shell_opened_on_one_rank_is_a_prompt() -> None:
    """Rank 1 sits in `cmd.Cmd.cmdloop()` of the author's debug console, opened on a loss spike;
    rank 0 waits in the next step's all_reduce (read MN3 before)."""
    state = classify(_rank("z_p8_spike_debug_console", 1, 2))
    assert state.kind == "debugger" and "cmd.Cmd" in state.detail, state
    picture = _job("z_p8_spike_debug_console", "torchrun")
    assert [d.entry for d in picture.diagnoses][:2] == ["P8", "MN3"], _says(picture)
    assert picture.suspect_ranks == (1,)


@pytest.mark.parametrize(
    ("job", "launcher", "entry", "odd"),
    [
        ("z_d21_save_checkpoint_main_barrier", "torchrun", "D21", (0,)),
        ("z_d9_log_hook_peeks_batch", "python", "D9", (0,)),
        ("z_mn3_wait_for_disk_space", "script", "MN3", (0,)),
        ("z_d9_length_filtered_sampler", "script", "D9", (2,)),
    ],
)
def test_the_batch_s_jobs_read_right_before_any_change_stay_right(
    job: str, launcher: str, entry: str, odd: tuple[int, ...]
) -> None:
    picture = _job(job, launcher)
    assert picture.diagnoses[0].entry == entry and picture.suspect_ranks == odd, _says(picture)


def test_the_launcher_s_rank_argument_reads_d1() -> None:
    """Both workers of `--local_rank` (default 0) under torchrun wait in init_process_group (the
    odd rank comes from each process's RANK against the rank it asked for, which these stored
    stacks do not carry)."""
    picture = _job("z_d1_local_rank_arg_default", "torchrun")
    assert picture.diagnoses[0].entry == "D1", _says(picture)
