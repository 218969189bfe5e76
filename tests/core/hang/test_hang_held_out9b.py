"""The hang analysis on the real stacks of session 9b's held-out hung jobs (eval/hangs/k_*.py, read
by bench/bench_hang_unseen.py --dump): py-spy's dumps of every rank that runs, torch 2.13, gloo."""

from __future__ import annotations

from tests.core.hang.test_hang_unseen_stacks import _job, _says
from triage.core.hang.paths import data_header
from triage.core.hang.source_context import line_context

SPAWN = "torch.multiprocessing.spawn"


def test_a_rank_that_skipped_a_step_on_a_non_finite_loss_went_nan() -> None:
    """`if not torch.isfinite(loss): continue` in a `for step in range(50)` loop: rank 1 skipped one
    gradient all_reduce and waits in the barrier after the loop, rank 0 in its last all_reduce."""
    picture = _job("k_d20_nan_skip_step")
    assert [d.entry for d in picture.diagnoses][:2] == ["D20", "D19"], _says(picture)
    assert picture.suspect_ranks == (1,) and "isfinite(loss)" in picture.diagnoses[0].evidence[0]


def test_a_rank_in_the_finally_of_a_try_the_others_are_still_in_raised() -> None:
    """`try: for step in range(10_000): ... finally: dist.barrier()`: rank 1 raised (a KeyError)
    and waits in the `finally`'s barrier; a counted loop cannot run out, so not D9."""
    picture = _job("k_d20_finally_barrier")
    assert [d.entry for d in picture.diagnoses][:2] == ["D20", "D9"], _says(picture)
    assert picture.suspect_ranks == (1,) and "`finally`" in picture.diagnoses[0].evidence[0]


def test_a_hand_strided_loop_is_a_loop_over_the_data_and_the_fewer_side_is_odd() -> None:
    """`for i in range(rank, len(xs), world)` over 10 samples and 3 ranks: rank 0 has one sample
    more and waits in its all_gather; ranks 1 and 2 ran out (D9), rank 0 is the odd rank out."""
    picture = _job("k_d9_eval_stride_gather", launcher=SPAWN)
    assert picture.diagnoses[0].entry == "D9" and picture.suspect_ranks == (0,), _says(picture)
    assert data_header("for i in range(rank, len(xs), world)")
    assert not data_header("for i in range(0, len(params), 2)")


def test_source_context_records_guarded_continues_and_the_finally_around_a_line() -> None:
    source = (
        "def f(xs):\n"
        "    try:\n"
        "        for x in xs:\n"
        "            if x is None:\n"
        "                continue\n"
        "            g(x)\n"
        "    finally:\n"
        "        h()\n"
    )
    assert line_context(source, 6).skips == ((5, "x is None"),)
    assert line_context(source, 8).final == (2, 8, 6) and line_context(source, 6).final is None


def test_the_other_held_out_jobs_of_session_9b_read_right() -> None:
    expected = {
        "k_d21_log_helper_barrier": ("D21", (0,), "torchrun"),
        "k_d21_meter_property": ("D21", (0,), SPAWN),
        "k_d9_filtered_shard": ("D9", (1,), "torchrun"),
        "k_mn3_async_saver_ack": ("MN3", (0,), "torchrun"),
        "k_mn3_pool_worker_killed": ("MN3", (0,), "torchrun"),
        "k_p8_dist_breakpoint": ("P8", (0,), "torchrun"),
    }
    for job, (entry, suspects, launcher) in expected.items():
        picture = _job(job, launcher=launcher)
        assert (picture.diagnoses[0].entry, picture.suspect_ranks) == (entry, suspects), (job, _says(picture))
