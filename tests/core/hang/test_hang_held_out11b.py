"""The hang analysis on the real stacks of session 11b's held-out hung jobs (eval/hangs/q_*.py, read
by bench/bench_hang_unseen.py --dump): py-spy's dumps of every rank that runs, torch 2.13, gloo."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.core.hang.test_hang_unseen_stacks import _job, _rank, _says
from triage.core.hang.analyse import analyse
from triage.core.hang.classify import RankState
from triage.core.hang.source_context import line_context
from triage.core.hang.stacks import RankSample

SPAWN = "torch.multiprocessing.spawn"
PLAIN = RankState.NO_LAUNCHER


def _without(samples: list[RankSample], **cleared: object) -> list[RankSample]:
    """The samples with some fields of every line context set to `cleared`'s values."""
    return [
        replace(s, contexts={k: replace(c, **cleared) for k, c in s.contexts.items()})  # type: ignore[arg-type]
        for s in samples
    ]


def test_a_barrier_in_a_callback_registered_on_one_rank_only_is_a_rank_conditional_collective() -> None:
    """A hand-written Trainer calls `getattr(callback, hook)(...)` for each registered callback;
    `ModelCheckpoint` (its `on_validation_end` waits in a barrier) is registered only where
    `cfg["checkpoint"]["enabled"]` (the main process). Rank 1 went on to the next epoch."""
    picture = _job("q_d21_callback_rank_config")
    assert [d.entry for d in picture.diagnoses][:2] == ["D21", "D19"], _says(picture)
    assert picture.suspect_ranks == (0,)
    assert 'cfg["checkpoint"]["enabled"]' in picture.verdict


def test_without_the_conditional_construction_the_callback_reads_otherwise() -> None:
    samples = _without([_rank("q_d21_callback_rank_config", r, 2) for r in range(2)], made_if="")
    picture = analyse(samples)
    assert "only some ranks made" not in picture.verdict
    assert [d.entry for d in picture.diagnoses][:1] != ["D21"], _says(picture)


def test_an_object_passed_on_from_the_loop_is_not_a_dispatch_to_it() -> None:
    """`run_hook(callback, hook)` hands the loop's object to a function: the method the rank waits
    in is not known to be the object's, so the registration rule says nothing."""
    samples = [_rank("q_d21_callback_rank_config", r, 2) for r in range(2)]
    passed = [
        replace(s, contexts={
            k: replace(c, code="run_hook(callback, hook, self, *args)") if "getattr(callback" in c.code else c
            for k, c in s.contexts.items()
        })
        for s in samples
    ]  # fmt: skip
    assert any("getattr(callback" in c.code for s in samples for c in s.contexts.values())
    assert "only some ranks made" not in analyse(passed).verdict


@pytest.mark.parametrize(
    ("source", "made"),
    [
        ("class W:\n    def f(self):\n        pass\nif rank == 0:\n    w = W()\n", "rank == 0"),
        ("class W:\n    def f(self):\n        pass\nws = [W()] if cfg.save else []\n", "cfg.save"),
        ("class W:\n    def f(self):\n        pass\nif rank == 0:\n    w = W()\nv = W()\n", ""),
        ('class W:\n    def f(self):\n        pass\nif __name__ == "__main__":\n    W().f()\n', ""),
        ("class W:\n    def f(self):\n        pass\nw = W()\n", ""),
    ],
)
def test_a_method_s_class_counts_as_made_under_a_test_only_where_every_making_call_is(
    source: str, made: str
) -> None:
    assert line_context(source, 3).made_if == made
    assert line_context(source, 1).made_if == ""  # the class line itself is in no method


def test_a_periodic_collective_met_after_a_skipped_step_is_a_desync() -> None:
    """Rank 0 skips its optimiser step (and gradient all_reduce) for all-padding batches through
    `if not tokens.any(): continue`, so it reaches `if meter.steps % log_every == 0` (an all_gather
    in a property) while ranks 1 and 2 wait in the gradient all_reduce it skipped."""
    picture = _job("q_d19_throughput_property_log")
    assert [d.entry for d in picture.diagnoses][:2] == ["D19", "D21"], _says(picture)
    assert picture.suspect_ranks == (0,)
    assert "continue" in picture.verdict


def test_without_the_skip_the_periodic_collective_reads_as_conditional() -> None:
    samples = _without([_rank("q_d19_throughput_property_log", r, 3) for r in range(3)], skips=())
    picture = analyse(samples)
    assert [d.entry for d in picture.diagnoses][:1] == ["D21"], _says(picture)


def test_a_periodic_broadcast_behind_a_per_rank_config_stays_rank_conditional() -> None:
    """`if ema_decay > 0: ... if step % 10 == 0: broadcast(...)`: EMA_DECAY was exported on rank 0
    only (a sweep agent there); the loop has no `continue`, so nothing ran ahead."""
    picture = _job("q_d21_ema_sweep_env", launcher=PLAIN)
    assert [d.entry for d in picture.diagnoses][:1] == ["D21"], _says(picture)
    assert picture.suspect_ranks == (0,)


@pytest.mark.parametrize(
    ("job", "launcher", "entry", "odd"),
    [
        ("q_d20_exitstack_profiler", SPAWN, "D20", (1,)),
        ("q_d21_metric_lazy_sync", SPAWN, "D21", (2,)),
        ("q_d9_iterable_worker_split", "torchrun", "D9", (1,)),
        ("q_mn3_uploader_task_done", PLAIN, "MN3", (0,)),
        ("q_p8_click_confirm_rollback", "torchrun", "P8", (0,)),
    ],
)
def test_the_rest_of_the_batch_reads_as_before(
    job: str, launcher: str, entry: str, odd: tuple[int, ...]
) -> None:
    picture = _job(job, launcher=launcher)
    assert picture.diagnoses and picture.diagnoses[0].entry == entry, _says(picture)
    assert picture.suspect_ranks == odd
