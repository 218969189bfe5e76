"""Watching the ranks check in through the store, and calling the verdict.

The monitor runs where it cannot be blocked by a collective: in the launching process for the local
mini-test, in a thread of rank 0 under torchrun. It polls one counter; when the counter moves it
re-reads every rank's record. A hang is "nothing moved for `stall_timeout_s`"; a crash is a rank
that raised or whose process exited before finishing (then the others get a short grace to report
their side before the verdict).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Protocol

from probes.dist.protocol import (
    FINISHED_KEY,
    PROGRESS_KEY,
    CheckIn,
    inventory_key,
    report_key,
    state_key,
)
from probes.dist.report import Outcome, RankView, conclude, locate_stop

POLL_S = 0.05
CRASH_GRACE_S = 2.0


class Store(Protocol):
    """The part of torch.distributed.Store the monitor uses."""

    def add(self, key: str, value: int) -> int: ...
    def check(self, keys: list[str]) -> bool: ...
    def get(self, key: str) -> bytes: ...
    def set(self, key: str, value: str | bytes) -> None: ...


class Monitor:
    """Polls the store until every rank finished, one failed, or nothing moved for too long."""

    def __init__(
        self,
        store: Store,
        world_size: int,
        *,
        stall_timeout_s: float,
        deadline_s: float,
        startup_timeout_s: float | None = None,
        exits: Callable[[], dict[int, int | None]] | None = None,
        cancel: threading.Event | None = None,
        backend: str = "",
    ) -> None:
        self.store = store
        self.world_size = world_size
        self.stall_timeout_s = stall_timeout_s
        self.deadline_s = deadline_s
        # Until every rank has reached the store, processes are still importing torch: a slow
        # start is not a hang, so only the startup limit (by default the deadline) applies.
        self.startup_timeout_s = startup_timeout_s if startup_timeout_s is not None else deadline_s
        self.exits = exits
        self.cancel = cancel or threading.Event()
        self.backend = backend
        self.views = {rank: RankView(rank) for rank in range(world_size)}

    def _refresh(self) -> None:
        for rank, view in self.views.items():
            if view.finished and view.report and view.inventory:
                continue
            if self.store.check([state_key(rank)]):
                record = CheckIn.decode(self.store.get(state_key(rank)))
                view.entered, view.done, view.error, view.detail = (
                    record.entered,
                    record.done,
                    record.error,
                    record.detail,
                )
            if not view.inventory and self.store.check([inventory_key(rank)]):
                view.inventory = json.loads(self.store.get(inventory_key(rank)))
            if view.finished and not view.report and self.store.check([report_key(rank)]):
                view.report = json.loads(self.store.get(report_key(rank)))

    def _patience(self, connected: bool, arrivals: int) -> float:
        """How long nothing may move before the verdict is a hang: the stall timeout once every
        rank is connected; the startup limit once some rank has reached the store (the others
        started with it); until then only the deadline, since no rank has finished importing torch
        yet and on a loaded machine that alone can take longer than any stall."""
        if connected:
            return self.stall_timeout_s
        return self.startup_timeout_s if arrivals > 0 else self.deadline_s

    def run(self) -> Outcome:
        """Watch until a verdict; then tell the ranks (the `finished` key) and return it."""
        start = time.monotonic()
        last_count = -1
        last_progress = start
        first_failure: float | None = None
        connected_at: float | None = None
        while True:
            now = time.monotonic()
            count = self.store.add(PROGRESS_KEY, 0)
            exited = self.exits() if self.exits is not None else {}
            new_exit = any(code is not None and self.views[r].exit_code is None for r, code in exited.items())
            if count != last_count or new_exit:
                if count != last_count:
                    last_progress = now
                last_count = count
                self._refresh()
                for rank, code in exited.items():
                    if code is not None:
                        self.views[rank].exit_code = code
            views = list(self.views.values())
            if connected_at is None and all(v.done >= 0 for v in views):
                connected_at = now
            extra = {
                "elapsed_s": round(now - start, 3),
                "connected_after_s": None if connected_at is None else round(connected_at - start, 3),
                "timeout_s": self.stall_timeout_s,
                "backend": self.backend,
            }
            verdict: str | None = None
            if self.cancel.is_set():
                verdict = "cancelled"
            elif all(v.finished for v in views):
                self._refresh()
                correct = all(v.report.get("correct", True) for v in views)
                verdict = "ok" if correct else "wrong_result"
            elif any(v.failed for v in views):
                first_failure = first_failure if first_failure is not None else now
                settled = all(v.failed or v.finished for v in views)
                if settled or now - first_failure >= CRASH_GRACE_S:
                    self._refresh()
                    verdict = "hang" if _silent_culprits(list(self.views.values())) else "crash"
            elif (
                now - last_progress >= self._patience(connected_at is not None, count)
                or now - start >= self.deadline_s
            ):
                self._refresh()
                verdict = "hang"
            if verdict is not None:
                try:
                    self.store.set(FINISHED_KEY, verdict)
                except Exception:
                    pass  # the store's host is gone; the ranks are being stopped anyway
                return conclude(verdict, list(self.views.values()), self.world_size, **extra)
            time.sleep(POLL_S)


def _silent_culprits(views: list[RankView]) -> bool:
    """True when the ranks that never arrived are all alive and silent: the others' errors (timeouts,
    closed connections) are then echoes of a hang, not a crash of their own."""
    _, missing = locate_stop(views)
    culprits = [v for v in views if v.rank in missing]
    return bool(culprits) and not any(v.failed for v in culprits)


def stalled_for(outcome: Outcome) -> float:
    """How long after the ranks were up the verdict came (what the hang tests bound)."""
    return outcome.elapsed_s - (outcome.connected_after_s or 0.0)
