"""The hang analysis on the real stacks of session 12's held-out hung jobs (eval/hangs/u_*.py, read
by bench/bench_hang_unseen.py --dump): py-spy's dumps of every rank that runs, torch 2.13, gloo."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import tests.core.hang.test_hang_unseen_stacks as unseen
from tests.core.hang.test_hang_unseen_stacks import _job, _says
from triage.core.hang.source_context import line_context


def test_a_rank_out_of_a_loop_a_broad_except_leaves_raised_there() -> None:
    """`while True: try: next(it) ... except StopIteration: break / except Exception: break`: rank
    1's DataLoader worker died (SIGSEGV) and the error ended its epoch (read D9 before)."""
    picture = _job("u_d20_loader_worker_segv_break")
    assert [d.entry for d in picture.diagnoses][:2] == ["D20", "D9"], _says(picture)
    assert picture.suspect_ranks == (1,)
    assert "except Exception" in picture.diagnoses[0].evidence[0]


def test_ranks_held_in_a_counting_loop_by_a_collective_under_an_if_are_the_odd_ones() -> None:
    """A compiled forward's data-dependent `if` (a graph break) holds rank 1 in an all_reduce at
    step 30 of `for step in range(60)`; rank 0 ran its 60 steps and waits in the barrier after
    (read D9 with rank 0 before)."""
    picture = _job("u_d21_compiled_amax_graph_break")
    assert picture.diagnoses[0].entry == "D21" and picture.suspect_ranks == (1,), _says(picture)
    assert "if h.abs().amax() > self.clip" in picture.diagnoses[0].evidence[0]


def test_a_rank_that_left_the_loop_did_not_pass_its_periodic_test() -> None:
    """Ranks 0 and 1 wait in the accumulation step's all_reduce under `if (step + 1) %
    self.grad_accum == 0 ...`; rank 2 reached its own max_steps and left the loop for the save's
    barrier: that is no per-rank period (read D19 before), it ran out of its steps first."""
    picture = _job("u_d9_accum_max_steps_per_rank")
    assert picture.diagnoses[0].entry == "D9" and picture.suspect_ranks == (2,), _says(picture)
    # two ranks are, one rank is: the evidence reads as a sentence
    assert "while ranks 0, 1 are still inside it" in picture.diagnoses[0].evidence[0]


def _variant(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, job: str, line: int, text: str) -> None:
    """The job's stored stacks with line `line` of its script replaced by `text` (same numbering)."""
    for path in unseen.DUMPS.glob(f"{job}*"):
        shutil.copy(path, tmp_path / path.name)
    script = tmp_path / f"{job}.py.txt"
    lines = script.read_text(encoding="utf-8").splitlines()
    indent = lines[line - 1][: len(lines[line - 1]) - len(lines[line - 1].lstrip())]
    lines[line - 1] = indent + text
    script.write_text("\n".join(lines) + "\n", encoding="utf-8")
    monkeypatch.setattr(unseen, "DUMPS", tmp_path)


def test_without_the_broad_except_the_rank_ran_out_of_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _variant(tmp_path, monkeypatch, "u_d20_loader_worker_segv_break", 64, "except StopIteration as err:")
    picture = _job("u_d20_loader_worker_segv_break")
    assert picture.diagnoses[0].entry == "D9" and picture.suspect_ranks == (1,), _says(picture)


def test_in_a_loop_over_the_data_the_rank_out_of_it_ran_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _variant(
        tmp_path, monkeypatch, "u_d21_compiled_amax_graph_break", 61, "for step, batch in enumerate(loader):"
    )
    picture = _job("u_d21_compiled_amax_graph_break")
    assert picture.diagnoses[0].entry == "D9" and picture.suspect_ranks == (0,), _says(picture)


@pytest.mark.parametrize(
    ("job", "entry", "odd", "launcher"),
    [
        ("u_d19_early_stop_callback_per_rank", "D19", (2,), "script"),
        ("u_d21_flat_shard_state_dict_save", "D21", (0,), "none"),
        ("u_d21_metrics_logger_gather_object", "D21", (0,), "torchrun"),
        ("u_d21_val_sync_bn_train_mode", "D21", (0,), "script"),
        ("u_mn3_cache_name_hash_wait", "MN3", (1, 2), "none"),
    ],
)
def test_the_other_held_out_jobs_keep_their_reading(
    job: str, entry: str, odd: tuple[int, ...], launcher: str
) -> None:
    picture = _job(job, launcher=launcher)
    assert picture.diagnoses[0].entry == entry and picture.suspect_ranks == odd, _says(picture)


_SOURCE = """
def train(loader, it):
    for batch in loader:
        try:
            step(batch)
        except (ValueError, RuntimeError):
            break
    while True:
        try:
            step(next(it))
        except StopIteration:
            break
        except KeyboardInterrupt:
            return
    for batch in loader:
        try:
            step(batch)
        except Exception:
            continue
        for part in batch:
            try:
                step(part)
            except:
                break
"""


def test_only_a_broad_except_that_leaves_the_loop_is_an_error_exit() -> None:
    assert line_context(_SOURCE, 5).error_exits == ((3, 6, "except (ValueError, RuntimeError)"),)
    assert line_context(_SOURCE, 10).error_exits == ()  # StopIteration, KeyboardInterrupt
    assert line_context(_SOURCE, 17).error_exits == ()  # `continue` stays in the loop
    # the bare `except: break` leaves the inner loop only
    assert line_context(_SOURCE, 22).error_exits == ((20, 23, "except"),)


def test_a_test_of_the_loop_counter_holds_on_every_rank_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`if step % 10 == 0:` around the collective: every rank takes it at the same iteration, so
    the rank out of the loop had fewer iterations (D9), not another test."""
    _variant(tmp_path, monkeypatch, "u_d21_compiled_amax_graph_break", 39, "if step % 10 == 0:")
    picture = _job("u_d21_compiled_amax_graph_break")
    assert picture.diagnoses[0].entry == "D9" and picture.suspect_ranks == (0,), _says(picture)
