"""The dist mini-test's monitor, on a real in-process torch store: when silence means a hang."""

from __future__ import annotations

import time

import torch.distributed as dist

from probes.dist.monitor import Monitor
from probes.dist.protocol import PROGRESS_KEY


def _watch(store: dist.Store, **limits: float) -> tuple[str, float]:
    started = time.monotonic()
    outcome = Monitor(store, 2, **limits).run()  # type: ignore[arg-type]
    return outcome.result, time.monotonic() - started


def test_no_rank_at_the_store_yet_waits_for_the_deadline_not_the_startup_limit() -> None:
    """Two ranks still importing torch on a loaded machine: nobody has arrived, so the short
    startup limit (meant for ranks left behind by the others) does not call it a hang."""
    result, took = _watch(dist.HashStore(), stall_timeout_s=0.2, startup_timeout_s=0.5, deadline_s=2.0)
    assert result == "hang"
    assert took >= 1.9, took


def test_ranks_left_behind_after_one_arrived_are_a_hang_at_the_startup_limit() -> None:
    store = dist.HashStore()
    store.add(PROGRESS_KEY, 1)  # one rank checked in; the other never follows
    result, took = _watch(store, stall_timeout_s=0.2, startup_timeout_s=0.5, deadline_s=5.0)
    assert result == "hang"
    assert 0.4 <= took < 2.0, took
