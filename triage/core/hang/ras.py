"""NCCL RAS status (`ncclras`, or `STATUS` on the RAS socket): which ranks lag or went missing.

NCCL 2.24+ answers on localhost:28028 (NCCL_RAS_ADDR) with a job summary; 2.28.7+ can answer in
JSON (`SET FORMAT json`): per communicator, every rank's collective counts, and the ranks that did
not answer. The text form names the same problems in its Errors / Warnings sections
(`#0-0 (hash) MISMATCH`, `N ranks have launched up to operation M`, `Rank R -- GPU g managed by
process P on node H`). Counts that differ while collectives fly are normal; a mismatch counts
only when two reads a moment apart show the same counts (the job is not moving). Pure.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

_COMM_HEADER = re.compile(r"^#(\d+-\d+) \(([0-9a-fA-Fx]+)\) ([A-Z ,]+)$")
_LAUNCHED = re.compile(r"^(\d+) ranks? (?:have|has) launched up to operation (\d+)$")
_RANK_LINE = re.compile(r"^Rank (\d+) -- GPU (\d+) managed by process (\d+) on node (\S+)$")
_MISSING_RANKS = re.compile(r"^The missing ranks?: ([\d, -]+)$")
_DEAD = re.compile(r"^(\d+) job process(?:es)? (?:is|are) considered dead")


@dataclass(frozen=True)
class RasComm:
    """One communicator: the operations each rank has launched, and the ranks that did not answer."""

    name: str  # "#0-0 (hash)" in text, the hash in JSON
    counts: dict[int, int] = field(default_factory=dict)  # rank -> operations launched (known ones)
    levels: tuple[tuple[int, int], ...] = ()  # text: (ranks, up to operation N) per line
    missing: tuple[int, ...] = ()
    dead: tuple[int, ...] = ()
    problems: tuple[str, ...] = ()  # MISMATCH, INCOMPLETE, ...

    def key(self) -> tuple[object, ...]:
        """What must stay equal between two reads for the picture to be stuck."""
        return (tuple(sorted(self.counts.items())), self.levels, self.missing, self.dead)


@dataclass(frozen=True)
class RasStatus:
    """What NCCL's RAS port says about the communicators and dead processes."""

    comms: tuple[RasComm, ...] = ()
    dead_processes: int = 0


def _ints(text: str) -> tuple[int, ...]:
    found: list[int] = []
    for part in text.split(","):
        low, _, high = part.strip().partition("-")
        if low.isdigit() and high.isdigit() and int(high) - int(low) < 1 << 16:
            found.extend(range(int(low), int(high) + 1))
        elif low.isdigit():
            found.append(int(low))
    return tuple(found)


def parse_text(text: str) -> RasStatus:
    """The communicators with problems, from RAS's text output."""
    comms: list[RasComm] = []
    current: dict[str, object] | None = None
    level: int | None = None
    dead = 0

    def close() -> None:
        if current is not None:
            comms.append(RasComm(**current))  # type: ignore[arg-type]

    for raw in text.splitlines():
        line = raw.strip()
        header = _COMM_HEADER.match(line)
        if header:
            close()
            problems = tuple(p.strip() for p in header.group(3).split(",") if p.strip())
            current = {"name": f"#{header.group(1)} ({header.group(2)})", "counts": {}, "levels": (),
                       "missing": (), "dead": (), "problems": problems}  # fmt: skip
            level = None
            continue
        if (match := _DEAD.match(line)) is not None:
            dead += int(match.group(1))
        if current is None:
            continue
        if (match := _LAUNCHED.match(line)) is not None:
            level = int(match.group(2))
            current["levels"] = (*current["levels"], (int(match.group(1)), level))  # type: ignore[misc]
        elif (match := _RANK_LINE.match(line)) is not None and level is not None:
            counts = current["counts"]
            assert isinstance(counts, dict)
            counts[int(match.group(1))] = level
        elif (match := _MISSING_RANKS.match(line)) is not None:
            current["missing"] = _ints(match.group(1))
        elif not line:
            level = None
    close()
    return RasStatus(tuple(comms), dead)


def _rank_list(items: object) -> list[Mapping[str, object]]:
    return [i for i in items if isinstance(i, Mapping)] if isinstance(items, list) else []


def parse_json(text: str) -> RasStatus:
    """Every communicator from RAS's JSON output. Raises ValueError when it is not that."""
    data = json.loads(text)
    if not isinstance(data, Mapping) or not isinstance(data.get("communicators"), list):
        raise ValueError("not NCCL RAS JSON (no `communicators`)")
    comms = []
    dead = 0
    for comm in _rank_list(data["communicators"]):
        counts: dict[int, int] = {}
        for rank in _rank_list(comm.get("ranks")):
            ops = rank.get("collective_counts")
            if isinstance(rank.get("rank"), int) and isinstance(ops, Mapping):
                counts[int(rank["rank"])] = sum(v for v in ops.values() if isinstance(v, int))  # type: ignore[call-overload]
        missing, gone = [], []
        for rank in _rank_list(comm.get("missing_ranks")):
            status = rank.get("status")
            if isinstance(rank.get("rank"), int):
                missing.append(int(rank["rank"]))  # type: ignore[call-overload]
                if isinstance(status, Mapping) and status.get("considered_dead"):
                    gone.append(int(rank["rank"]))  # type: ignore[call-overload]
        dead += len(gone)
        problems = (("MISMATCH",) if len(set(counts.values())) > 1 else ()) + (
            ("INCOMPLETE",) if missing else ()
        )
        comms.append(RasComm(str(comm.get("hash", "?")), counts, (), tuple(missing), tuple(gone), problems))
    return RasStatus(tuple(comms), dead)


def parse(text: str) -> RasStatus:
    """JSON or text, whichever `text` is."""
    return parse_json(text) if text.lstrip().startswith("{") else parse_text(text)


def _ranks(ranks: list[int] | tuple[int, ...]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(str(r) for r in sorted(ranks))


def stuck(first: RasStatus, second: RasStatus) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """What two reads agree on: lines naming the lagging and missing ranks, and those ranks.
    A communicator whose counts moved between the reads is progressing, and says nothing."""
    before = {c.name: c for c in first.comms}
    lines: list[str] = []
    suspects: set[int] = set()
    for comm in second.comms:
        old = before.get(comm.name)
        if old is None or old.key() != comm.key() or not (comm.problems or comm.missing):
            continue
        if comm.levels:  # text: the lagging ranks are named only when they are few
            low = min(op for _, op in comm.levels)
            behind = sorted(r for r, n in comm.counts.items() if n == low)
            lagging = sum(n for n, op in comm.levels if op == low)
            if behind:
                suspects.update(behind)
                lines.append(
                    f"NCCL RAS, communicator {comm.name}: {_ranks(behind)} launched operations up to "
                    f"{low}, the others further, the same in two reads: the others wait for them"
                )
            elif len(comm.levels) > 1:
                lines.append(
                    f"NCCL RAS, communicator {comm.name}: {lagging} ranks launched operations up to {low}, "
                    f"{_ranks(sorted(comm.counts))} further, the same in two reads: the {lagging} lag"
                )
        elif len(set(comm.counts.values())) > 1:
            low = min(comm.counts.values())
            behind = sorted(r for r, n in comm.counts.items() if n == low)
            suspects.update(behind)
            lines.append(
                f"NCCL RAS, communicator {comm.name}: {_ranks(behind)} launched {low} operations, the "
                f"others up to {max(comm.counts.values())}, the same in two reads: the others wait for them"
            )
        if comm.missing:
            dead = f" ({_ranks(comm.dead)} considered dead)" if comm.dead else ""
            suspects.update(comm.missing)
            lines.append(f"NCCL RAS, communicator {comm.name}: {_ranks(comm.missing)} did not answer{dead}")
    return tuple(lines), tuple(sorted(suspects))
