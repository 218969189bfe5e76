"""The hang analysis on the real stacks of session 12b's held-out hung jobs (eval/hangs/v_*.py, read
by bench/bench_hang_unseen.py --dump): py-spy's dumps of every rank that runs, torch 2.13, gloo."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

import tests.core.hang.test_hang_unseen_stacks as unseen
from probes.hang.pyspy import parse_dump
from tests.core.hang.test_hang_held_out12 import _variant
from tests.core.hang.test_hang_unseen_stacks import _job, _rank, _says
from triage.core.hang.analyse import HangPicture, analyse
from triage.core.hang.source_context import line_context


def test_a_rank_past_the_loop_skipped_a_step_through_an_except_that_goes_on() -> None:
    """Rank 0 waits in an all_reduce inside the `try` of `for step, record in enumerate(shard)`,
    whose `except Exception: ... continue` swallows a bad record; rank 1 waits in the barrier
    after the loop (read D9 before: out of batches)."""
    picture = _job("v_d19_except_continue_skips_reduce")
    assert [d.entry for d in picture.diagnoses][:2] == ["D19", "D20"], _says(picture)
    assert picture.suspect_ranks == (1,)
    assert "except Exception" in picture.diagnoses[0].evidence[0]


def test_an_except_for_the_end_of_the_data_is_no_swallowed_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _variant(tmp_path, monkeypatch, "v_d19_except_continue_skips_reduce", 59, "except StopIteration as exc:")
    picture = _job("v_d19_except_continue_skips_reduce")
    assert picture.diagnoses[0].entry == "D9" and picture.suspect_ranks == (1,), _says(picture)


def test_a_period_each_rank_works_out_from_its_own_batch_parts_the_ranks() -> None:
    """`eval_every = max(1, EVAL_TOKENS // tokens.numel())` from each rank's first batch: rank 1
    waits in the evaluation's barrier under `if step % eval_every == 0`, rank 0 in DDP's backward
    of the same loop (read D21 before: a collective only some ranks reach)."""
    picture = _job("v_d19_eval_every_from_tokens", "script")
    assert [d.entry for d in picture.diagnoses][:2] == ["D19", "D21"], _says(picture)
    assert picture.suspect_ranks == (1,)
    assert "values of the rank's own" in picture.diagnoses[0].evidence[0]


def test_a_period_bound_to_a_literal_is_no_per_rank_period(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _variant(tmp_path, monkeypatch, "v_d19_eval_every_from_tokens", 67, "eval_every = 40")
    picture = _job("v_d19_eval_every_from_tokens", "script")
    assert picture.diagnoses[0].entry == "D21" and picture.suspect_ranks == (1,), _says(picture)


def _local_rank_job(rank_asked: bool) -> HangPicture:
    job = "v_d1_local_rank_as_rank"
    sample = _rank(job, 1, 2, "none")
    if rank_asked:
        text = (unseen.DUMPS / f"{job}_rank1.json").read_text(encoding="utf-8")
        sample = replace(sample, rank_asked=parse_dump(text, 101, rank_of=True).rank_asked)
    return analyse([sample])


def test_the_rank_nobody_asked_init_process_group_for_is_the_one_missing() -> None:
    """Two `python` processes with RANK 0 and 1 both pass `rank=args.local_rank` (default 0): the
    one left (RANK=1) waits in init_process_group as rank 0 (read D1 with rank 0 before)."""
    picture = _local_rank_job(rank_asked=True)
    assert picture.diagnoses[0].entry == "D1", _says(picture)
    assert picture.suspect_ranks == (1,) and picture.missing_ranks == (1,)
    assert "asked init_process_group for rank 0" in picture.verdict


def test_without_the_rank_argument_read_the_environment_decides() -> None:
    picture = _local_rank_job(rank_asked=False)
    assert picture.suspect_ranks == (0,), _says(picture)


@pytest.mark.parametrize(
    ("binding", "derived"),
    [
        ("every = len(shard) // 4", True),
        ("every = args.eval_every", True),
        ("every = max(1, BUDGET // batch.numel())", True),
        ("every = 20", False),
        ("every = max(1, BUDGET // 8)", False),
        ("every = EVERY", False),
    ],
)
def test_periods_bound_from_the_rank_s_own_values(binding: str, derived: bool) -> None:
    source = (
        "def train(shard, args, batch):\n"
        f"    {binding}\n"
        "    for step in range(100):\n"
        "        if step % every == 0:\n"
        "            sync()\n"
    )
    assert line_context(source, 5).derived_periods == ((4,) if derived else ())


@pytest.mark.parametrize(
    ("handler", "found"),
    [
        ("    except Exception:\n            log()\n            continue\n        after()\n", True),
        ("    except Exception:\n            log()\n", True),
        ("    except Exception:\n            break\n", False),
        ("    except StopIteration:\n            continue\n", False),
        ("    except Exception:\n            log()\n        after()\n", False),
    ],
)
def test_a_try_whose_broad_except_goes_round_again(handler: str, found: bool) -> None:
    source = "def train(xs):\n    for x in xs:\n        try:\n            sync(x)\n    " + handler
    skips = line_context(source, 4).error_skips
    assert skips == (((2, 3, 4, handler.split(":")[0].strip()),) if found else ())
