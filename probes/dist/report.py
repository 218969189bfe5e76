"""Turning what the ranks checked in into a verdict, the cross-rank differences, and the facts.

Pure (no torch, no store): the monitor fills RankViews, these functions read them. Rank 0 under
torchrun and the local launcher both print through `format_text`, so a multi-node report and a
single-box one look the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from probes.dist.protocol import LAST, STEPS
from triage.core.redact import redact_obj

# Must agree on every rank; differences here break or slow collectives (the multi-node checklist).
MUST_AGREE = ("python", "torch", "cuda", "nccl", "backend")
# May differ per node without being wrong; shown when they do.
MAY_DIFFER = ("driver", "gpus", "data_mtus")


@dataclass
class RankView:
    """Everything the monitor knows about one rank."""

    rank: int
    entered: int = -1
    done: int = -1
    error: str = ""
    detail: str = ""
    exit_code: int | None = None  # local mode only: the process has exited with this code
    inventory: dict[str, Any] = field(default_factory=dict)
    report: dict[str, Any] = field(default_factory=dict)
    output_tail: str = ""  # local mode: the end of the rank's stderr when it failed

    @property
    def finished(self) -> bool:
        return self.done >= LAST

    @property
    def failed(self) -> bool:
        return bool(self.error) or (self.exit_code is not None and not self.finished)

    @property
    def last_step(self) -> str:
        """Where the rank was last seen, in words."""
        if self.entered > self.done:
            return f"inside {STEPS[self.entered]}"
        if self.done >= 0:
            return f"after {STEPS[self.done]}"
        return "before connecting to the store"

    def result(self) -> str:
        if self.error:
            inside = self.entered > self.done
            step = STEPS[min(max(self.entered if inside else self.done + 1, 0), LAST)]
            return f"error {'in' if inside else 'before'} {step}: {self.error}"
        if self.exit_code is not None and not self.finished:
            return f"exited with code {self.exit_code} {self.last_step}"
        if self.finished:
            return "ok" if self.report.get("correct", True) else f"wrong all_reduce result {self.report.get('value')}"
        if self.entered > self.done:
            return f"waiting {self.last_step}"
        return f"silent {self.last_step}"


@dataclass
class Outcome:
    """The verdict on one run of the mini-test."""

    result: str  # ok | hang | crash | wrong_result | cancelled
    world_size: int
    ranks: list[RankView]
    stopped_at: str = ""
    missing: list[int] = field(default_factory=list)
    reason: str = ""
    elapsed_s: float = 0.0
    connected_after_s: float | None = None  # when every rank had reached the store
    timeout_s: float = 0.0
    backend: str = ""

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["differences"] = [asdict(d) for d in differences(self.ranks)]
        data["nodes"] = nodes(self.ranks)
        data["bus_bandwidth_gbps"] = peak_busbw(self.ranks)
        return redact_obj(data)  # type: ignore[return-value]


def locate_stop(views: Sequence[RankView]) -> tuple[str, list[int]]:
    """The first step not every rank finished, and the ranks that never arrived at it.

    A rank "arrived" at a step when it checked in as entering it; a rank that raised or exited on its
    way there, or never connected at all, did not."""
    if not views:
        return "", []
    stop = min(v.done for v in views) + 1
    if stop > LAST:
        return "", []
    missing = sorted(v.rank for v in views if v.entered < stop)
    return STEPS[stop], missing


def conclude(kind: str, views: list[RankView], world_size: int, **extra: Any) -> Outcome:
    """An Outcome of `kind` with where it stopped, who is missing, and a one-line reason."""
    stopped_at, missing = locate_stop(views)
    outcome = Outcome(kind, world_size, sorted(views, key=lambda v: v.rank), stopped_at, missing, **extra)
    outcome.reason = _reason(outcome)
    return outcome


def _ranks(ranks: Sequence[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(str(r) for r in ranks)


def _reason(outcome: Outcome) -> str:
    views = outcome.ranks
    if outcome.result == "ok":
        return f"{outcome.world_size} ranks passed init, barrier, all_reduce (checked) and the size sweep"
    if outcome.result == "wrong_result":
        bad = [v.rank for v in views if not v.report.get("correct", True)]
        return f"all_reduce returned a wrong sum on {_ranks(bad)}"
    if outcome.result == "cancelled":
        return "cancelled"
    where = outcome.stopped_at or "the end"
    if outcome.missing:
        causes = []
        for view in views:
            if view.rank in outcome.missing:
                if view.error:
                    causes.append(f"rank {view.rank} raised {view.error}")
                elif view.exit_code is not None:
                    causes.append(f"rank {view.rank} exited with code {view.exit_code} {view.last_step}")
                elif view.entered < 0 and view.done < 0:
                    causes.append(f"rank {view.rank} never reached the store (still starting, or stuck importing)")
                else:
                    causes.append(f"rank {view.rank} is alive but silent {view.last_step}")
        head = f"{_ranks(outcome.missing)} never arrived at {where}"
        if outcome.result == "hang" and any(v.done >= 0 for v in views if v.rank in outcome.missing):
            head += f" within {outcome.timeout_s:g}s"
        return head + ": " + "; ".join(causes)
    failed = [v for v in views if v.failed]
    if failed:
        first = failed[0]
        return f"every rank arrived at {where}, then {first.result()}"
    return f"every rank entered {where} and none finished within {outcome.timeout_s:g}s"


def nodes(views: Sequence[RankView]) -> list[dict[str, Any]]:
    """Ranks grouped by node (host and node rank), in node order."""
    groups: dict[tuple[str, str], list[int]] = {}
    for view in views:
        inv = view.inventory
        if not inv:
            continue  # never reached the store: its node is unknown
        key = (str(inv.get("host", "?")), str(inv.get("node", "?")))
        groups.setdefault(key, []).append(view.rank)
    return [{"host": host, "node": node, "ranks": sorted(ranks)} for (host, node), ranks in sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][0]))]


@dataclass(frozen=True)
class Difference:
    """One setting that is not the same on every rank; `values` maps each value to its ranks."""

    setting: str  # not "key": redaction hides values under secret-sounding names
    values: dict[str, list[int]]
    must_agree: bool


def differences(views: Sequence[RankView]) -> list[Difference]:
    """Settings that differ between the ranks that reported an inventory."""
    reported = [v for v in views if v.inventory]
    if len(reported) < 2:
        return []
    found = []

    def compare(key: str, value_of: Any, must_agree: bool) -> None:
        values: dict[str, list[int]] = {}
        for view in reported:
            values.setdefault(str(value_of(view.inventory)), []).append(view.rank)
        if len(values) > 1:
            found.append(Difference(key, values, must_agree))

    for key in MUST_AGREE:
        compare(key, lambda inv, k=key: inv.get(k, ""), True)
    env_names = sorted({name for v in reported for name in v.inventory.get("nccl_env", {})})
    for name in env_names:
        compare(name, lambda inv, n=name: inv.get("nccl_env", {}).get(n, "(unset)"), True)
    for key in MAY_DIFFER:
        compare(key, lambda inv, k=key: inv.get(k, ""), False)
    return found


def peak_busbw(views: Sequence[RankView]) -> float | None:
    """The highest bus bandwidth rank 0 (else any rank) measured in the sweep, in GB/s."""
    for view in sorted(views, key=lambda v: v.rank):
        sweep = view.report.get("sweep") or []
        if sweep:
            return round(max(float(row["busbw_gbps"]) for row in sweep), 3)
    return None


def facts(outcome: Outcome) -> dict[str, object]:
    """The dist.* facts of facts.yaml."""
    out: dict[str, object] = {}
    if outcome.result in ("ok", "hang", "crash", "wrong_result"):
        out["dist.minitest"] = outcome.result
        out["dist.missing_ranks"] = list(outcome.missing)
    if sum(1 for v in outcome.ranks if v.inventory) >= 2:
        out["dist.cross_rank_mismatch"] = any(d.must_agree for d in differences(outcome.ranks))
    bw = peak_busbw(outcome.ranks)
    if bw is not None:
        out["dist.bus_bandwidth_gbps"] = bw
    return out


def format_text(outcome: Outcome) -> str:
    """The human report: verdict, per-rank table, nodes, sweep, differences."""
    lines = [f"dist mini-test: {outcome.result.upper()} - {outcome.reason}"]
    lines.append(
        f"backend {outcome.backend or '?'}, {outcome.world_size} ranks, {outcome.elapsed_s:.1f}s"
        + (f", hang timeout {outcome.timeout_s:g}s" if outcome.timeout_s else "")
    )
    lines.append("")
    lines.append(f"{'rank':>4}  {'node':>4}  {'host':<20} {'device':<10} result")
    for view in outcome.ranks:
        inv = view.inventory
        lines.append(
            f"{view.rank:>4}  {inv.get('node', '?')!s:>4}  {str(inv.get('host', '?'))[:20]:<20} "
            f"{str(inv.get('device', '?'))[:10]:<10} {view.result()}"
        )
        if view.output_tail and not view.error and (view.failed or view.rank in outcome.missing):
            lines.extend("        | " + line for line in view.output_tail.splitlines()[-6:])
    groups = nodes(outcome.ranks)
    if len(groups) > 1:
        lines.append("")
        lines.append("nodes: " + "; ".join(f"node {g['node']} ({g['host']}): ranks {g['ranks']}" for g in groups))
    for view in outcome.ranks:
        sweep = view.report.get("sweep") or []
        if sweep:
            lines.append("")
            lines.append(f"all_reduce sweep (rank {view.rank}):   size      time    algbw    busbw")
            for row in sweep:
                lines.append(
                    f"{'':>30}{_size(int(row['bytes'])):>8} {row['time_s'] * 1e3:>7.2f}ms "
                    f"{row['algbw_gbps']:>6.2f}GB/s {row['busbw_gbps']:>6.2f}GB/s"
                )
            break
    diffs = differences(outcome.ranks)
    if diffs:
        lines.append("")
        lines.append("differences between ranks:")
        for diff in diffs:
            tag = "MISMATCH" if diff.must_agree else "differs"
            shown = "; ".join(f"{value} on {_ranks(ranks)}" for value, ranks in diff.values.items())
            lines.append(f"  {tag:<8} {diff.setting}: {shown}")
    return str(redact_obj("\n".join(lines)))


def _size(n: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:g}{unit}"
    return f"{n}B"
