"""The hang analysis on the real stacks of session 11c's held-out hung jobs (eval/hangs/r_*.py, read
by bench/bench_hang_unseen.py --dump): py-spy's dumps of every rank that runs, torch 2.13, gloo."""

from __future__ import annotations

import ast
from dataclasses import replace

import pytest

from tests.core.hang.test_hang_unseen_stacks import _job, _rank, _says
from triage.core.hang.analyse import analyse
from triage.core.hang.construction import suppressing_with
from triage.core.hang.source_context import line_context
from triage.core.hang.stacks import RankSample


def _without(samples: list[RankSample], **cleared: object) -> list[RankSample]:
    """The samples with some fields of every line context set to `cleared`'s values."""
    return [
        replace(s, contexts={k: replace(c, **cleared) for k, c in s.contexts.items()})  # type: ignore[arg-type]
        for s in samples
    ]


def _ranks(job: str, world: int) -> list[RankSample]:
    return [_rank(job, r, world) for r in range(world)]


def test_a_rank_in_an_except_after_a_non_finite_raise_went_nan() -> None:
    """`train_epoch` raises FloatingPointError under `if not torch.isfinite(loss):`; rank 1 caught
    it in `main`'s `except` and waits in the restart's weight broadcast, rank 0 in the all_reduce
    below that `raise` (a retry loop around it, which read D19 with rank 0 before)."""
    picture = _job("r_d20_nan_restart_loop")
    assert [d.entry for d in picture.diagnoses][:2] == ["D20", "D19"], _says(picture)
    assert picture.suspect_ranks == (1,)
    assert "isfinite" in " ".join(picture.diagnoses[0].evidence)


def test_without_the_non_finite_check_the_handler_rank_is_no_nan_rank() -> None:
    samples = _without(_ranks("r_d20_nan_restart_loop", 2), raises=())
    handlers = [c.handler for s in samples for c in s.contexts.values() if c.handler]
    assert handlers and all("FloatingPointError" in h[1] for h in handlers)
    # the clause still names the error raised for non-finite values
    assert analyse(samples).diagnoses[0].entry == "D20"
    renamed = [
        replace(s, contexts={k: replace(c, raises=(), handler=c.handler and (c.handler[0], "except ValueError as err"))
                             for k, c in s.contexts.items()})
        for s in samples
    ]  # fmt: skip
    assert analyse(renamed).diagnoses[0].entry != "D20", _says(analyse(renamed))


def test_a_rank_earlier_in_the_loop_than_a_suppress_block_skipped_its_collective() -> None:
    """`with contextlib.suppress(Exception):` holds the gradient all_reduce; rank 1 raised inside
    it (an empty mask), went round and waits in the next step's broadcast (no odd rank before)."""
    picture = _job("r_d19_suppress_bad_batch")
    assert [d.entry for d in picture.diagnoses][:2] == ["D19", "D20"], _says(picture)
    assert picture.suspect_ranks == (1,)
    plain = analyse(_without(_ranks("r_d19_suppress_bad_batch", 2), suppressed=None))
    assert "swallowed exception" not in plain.verdict


def test_a_collective_in_backward_of_a_function_applied_under_an_if_is_rank_conditional() -> None:
    """`GatherKeys.apply(k)` only for batches over `LONG`: rank 0's backward all_gathers, rank 1
    (a short batch) waits in the gradient all_reduce (read with rank 1 the odd one before)."""
    picture = _job("r_d21_recompute_backward_gather")
    assert [d.entry for d in picture.diagnoses][:2] == ["D21", "D19"], _says(picture)
    assert picture.suspect_ranks == (0,)
    assert "x.shape[1] > LONG" in picture.verdict
    plain = analyse(_without(_ranks("r_d21_recompute_backward_gather", 2), made_if=""))
    assert "autograd Function" not in plain.verdict


def test_a_periodic_collective_with_a_per_rank_period_is_a_desync() -> None:
    """Each rank reads its sweep job's `val_every` (2, 3, 2): ranks 0 and 2 wait in validation's
    barrier, rank 1 in the next step's all_reduce (read D21 before)."""
    picture = _job("r_d19_sweep_config_per_rank")
    assert [d.entry for d in picture.diagnoses][:2] == ["D19", "D21"], _says(picture)
    assert picture.suspect_ranks == (1,)


@pytest.mark.parametrize(
    ("test", "reads_period"),
    [
        ('step % cfg["val_every"] == 0', True),
        ("step % args.eval_every == 0", True),
        ("step % 10 == 0", False),
        ("step % SYNC_EVERY == 0", False),
        ("meter.steps % log_every == 0", False),
    ],
)
def test_only_a_period_that_is_not_a_constant_is_read_as_per_rank(test: str, reads_period: bool) -> None:
    from triage.core.hang.errors_apart import _CONSTANT, _PERIOD

    found = _PERIOD.search(test)
    assert found is not None
    assert (not _CONSTANT.match(found.group("period").strip())) is reads_period


@pytest.mark.parametrize(
    "job",
    ["r_d21_post_init_broadcast", "r_d9_coroutine_consumer", "r_mn3_executor_map_discarded",
     "r_p8_warning_hook_pdb", "r_mn3_readline_buffered_child"],
)  # fmt: skip
def test_the_batch_s_jobs_read_right_before_any_change_still_do(job: str) -> None:
    want = {
        "r_d21_post_init_broadcast": ("D21", (0,)),
        "r_d9_coroutine_consumer": ("D9", (2,)),
        "r_mn3_executor_map_discarded": ("MN3", (0,)),
        "r_p8_warning_hook_pdb": ("P8", (1,)),
        "r_mn3_readline_buffered_child": ("MN3", (0,)),
    }[job]
    picture = _job(job)
    assert (picture.diagnoses[0].entry, picture.suspect_ranks) == want, _says(picture)


def test_suppress_blocks_are_found_around_a_line_of_their_own_function_only() -> None:
    source = (
        "import contextlib\n"
        "def f():\n"
        "    for i in range(3):\n"
        "        with contextlib.suppress(Exception):\n"
        "            g()\n"
        "        h()\n"
        "    with open('x') as fh:\n"
        "        g()\n"
    )
    assert line_context(source, 5).suppressed == (4, 5)
    assert line_context(source, 6).suppressed is None
    assert line_context(source, 8).suppressed is None
    tree = ast.parse(source)
    assert suppressing_with([tree]) is None


def test_guarded_raises_are_kept_apart_from_returns() -> None:
    source = "def f(x):\n    if x != x:\n        raise FloatingPointError\n    if not x:\n        return\n    g(x)\n"
    ctx = line_context(source, 6)
    assert ctx.raises == ((2, "x != x"),)
    assert ctx.returns == ((4, "not x"),)
