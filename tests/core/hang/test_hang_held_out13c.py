"""The hang analysis on the real stacks of session 13c's held-out hung jobs (eval/hangs/za_*.py, read
by bench/bench_hang_unseen.py --dump): py-spy's dumps of every rank that runs, torch 2.13, gloo."""

from __future__ import annotations

import ast

import pytest

from tests.core.hang.test_hang_unseen_stacks import _job, _says
from triage.core.hang.periods import derived_periods
from triage.core.hang.source_context import line_context


def test_an_eval_period_from_each_ranks_loader_length_is_the_loaders_lengths() -> None:
    """`eval_every = len(train_loader) // 2` on per-rank shards of different sizes: rank 2 gathers
    the eval scores while ranks 0 and 1 are in DDP's backward (read D19 before, D22 second)."""
    picture = _job("za_d22_eval_every_from_loader_len", "script")
    assert [d.entry for d in picture.diagnoses][:2] == ["D22", "D19"], _says(picture)
    assert picture.suspect_ranks == (2,)


@pytest.mark.parametrize(
    ("bind", "from_length"),
    [
        ("every = len(loader) // 2", True),
        ("every = max(1, len(shard) // 4)", True),
        ("every = len(EVAL_SET) // 2", False),
        ("every = args.eval_every", False),
        ("every = TOKENS // x.numel()", False),
    ],
)
def test_a_period_from_a_length_is_told_from_other_own_periods(bind: str, from_length: bool) -> None:
    source = f"def f(loader, shard, args, x):\n    {bind}\n    if step % every == 0:\n        sync()\n"
    function = ast.parse(source).body[0]
    tests = [n for n in ast.walk(function) if isinstance(n, ast.If)]
    assert bool(derived_periods(function, tests, from_length=True)) is from_length


def test_a_branch_on_a_task_drawn_by_a_clock_seeded_sampler_is_a_desync() -> None:
    """`TaskMixSampler` seeds itself with `int(time.time())`; rank 0 built it a second earlier and
    draws another task sequence: it gathers for the contrastive task while ranks 1 and 2 are in the
    gradient all_reduce (read D21 before, through `if task == "contrastive"`)."""
    picture = _job("za_d19_task_mix_sampler_wallclock_seed", "script")
    assert [d.entry for d in picture.diagnoses][:2] == ["D19", "D21"], _says(picture)
    assert picture.suspect_ranks == (0,)
    assert "seeded from the clock" in picture.diagnoses[0].evidence[0]


@pytest.mark.parametrize(
    ("line", "seeded"),
    [
        ("rng = random.Random(int(time.time()))", True),
        ("torch.manual_seed(time.time_ns() % 2**31)", True),
        ("g = np.random.default_rng(int(datetime.now().timestamp()))", True),
        ("rng = random.Random(args.seed + rank)", False),
        ("started = time.time()", False),
    ],
)
def test_a_generator_seeded_from_the_clock_is_found_in_the_source(line: str, seeded: bool) -> None:
    assert line_context(f"{line}\nx = 1\n", 2).clock_seeded is seeded


def test_a_rank_that_raised_mid_epoch_waits_in_its_context_managers_finally() -> None:
    """Ranks 2 and 3 raised on their node's truncated cache and wait in the barrier of a
    @contextmanager's `finally`; ranks 0 and 1 are in the data loop of epoch 2 of `for epoch in
    range(1, 6)`: out of data they would have gone round the epoch loop, so they raised (read D19
    before, D20 second)."""
    picture = _job("za_d20_context_finally_barrier_node_cache", "torchrun")
    assert [d.entry for d in picture.diagnoses][:2] == ["D20", "D19"], _says(picture)
    assert picture.suspect_ranks == (2, 3)


def test_a_pipeline_stage_that_skips_a_micro_batch_is_the_odd_one() -> None:
    """Stage 1 skips a micro-batch with no target token (`continue` before its recv); stage 0 waits
    for that micro-batch's gradient, stage 1 for the next step's activations: both in recv, no peer
    named wrong (read D19 with no odd rank before)."""
    picture = _job("za_d9_pipeline_last_stage_skips_masked", "torchrun")
    assert [d.entry for d in picture.diagnoses][:2] == ["D9", "D19"], _says(picture)
    assert picture.suspect_ranks == (1,)
    assert "point-to-point" in picture.verdict


def test_a_p2p_pair_with_no_skip_on_either_side_keeps_its_reading() -> None:
    """The crossed-peer pipeline (a recv naming the wrong source) is p2p.py's, not a skip."""
    picture = _job("w_d19_pipeline_recv_wrong_src", "torchrun")
    assert "skipped a point-to-point" not in picture.verdict, _says(picture)
