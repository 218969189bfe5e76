"""The ranks at a glance: one row per rank, or per run of ranks in the same state, as a picture.

Used by `triage log` (from a scan's events), the report, and `triage hang` (from stacks): each
builds per-rank rows and hands them here. Ranks that look alike (same state, same last line once
numbers are ignored) fold into one row (`2-7`); the first failure is marked, echoes are dimmed.

    rank  state          when          last
    1     ✗ FIRST FAIL   20:22:53.10   FloatingPointError: loss is nan at step 3
    0     · waited       20:22:53.66   RuntimeError: Connection closed by peer [127.0.0.1]:34529
    2-7   · waited       20:22:53.70   Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5

Pure: rows in, lines out (styled for a terminal, or plain for Markdown).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from triage.render.terminal import BOLD, DIM, RED, YELLOW, Style

# A rank's state, as its row shows it, and whether that row is an echo (dimmed).
STATES = {
    "first": ("✗ FIRST FAIL", False),
    "timeout": ("✗ timed out", False),  # the first error, but one that only says it waited
    "failed": ("✗ failed", False),
    "suspect": ("? silent", False),
    "waiting": ("· waited", True),
    "stopped": ("· stopped", True),
    "running": ("  running", False),
    "ok": ("  ok", True),
}
_NUMBERS = re.compile(r"\d+")


@dataclass(frozen=True)
class RankRow:
    """What one rank did last: `state` is a key of STATES, `when` a time or a place, `last` a line."""

    rank: int
    state: str
    last: str
    when: str = ""


@dataclass(frozen=True)
class RankGroup:
    """Ranks in the same state, shown as one row."""

    ranks: tuple[int, ...]
    state: str
    last: str
    when: str

    @property
    def label(self) -> str:
        return rank_ranges(self.ranks)


def rank_ranges(ranks: Sequence[int]) -> str:
    """`0-3,5,7-8` for a sorted run of ranks."""
    parts: list[str] = []
    start = prev = None
    for rank in sorted(ranks):
        if start is None:
            start = prev = rank
        elif prev is not None and rank == prev + 1:
            prev = rank
        else:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
            start = prev = rank
    if start is not None:
        parts.append(str(start) if start == prev else f"{start}-{prev}")
    return ",".join(parts)


def group_rows(rows: Sequence[RankRow]) -> list[RankGroup]:
    """Rows in rank order, neighbours in the same state with the same line (numbers aside) folded."""
    groups: list[RankGroup] = []
    for row in sorted(rows, key=lambda r: r.rank):
        last = groups[-1] if groups else None
        if (
            last is not None
            and row.state == last.state
            and row.state not in ("first", "timeout")
            and _shape(row.last) == _shape(last.last)
            and row.rank == last.ranks[-1] + 1
        ):
            groups[-1] = RankGroup((*last.ranks, row.rank), last.state, last.last, last.when)
        else:
            groups.append(RankGroup((row.rank,), row.state, row.last, row.when))
    return groups


def _shape(text: str) -> str:
    return _NUMBERS.sub("#", text)


def render_ranks(rows: Sequence[RankRow], style: Style, *, width: int | None = None) -> list[str]:
    """The picture as lines: a header, then one line per group of ranks, cut to `width`."""
    if not rows:
        return []
    groups = group_rows(rows)
    width = width or style.width
    rank_w = max(4, *(len(g.label) for g in groups))
    when_w = max(4, *(len(g.when) for g in groups))
    state_w = max(len(label) for label, _ in STATES.values())
    header = f"{'rank':<{rank_w}}  {'state':<{state_w}}  {'when':<{when_w}}  last"
    lines = [style.paint(header, BOLD)]
    for group in groups:
        label, echo = STATES.get(group.state, (group.state, False))
        head = f"{group.label:<{rank_w}}  {label:<{state_w}}  {group.when:<{when_w}}  "
        room = max(10, width - len(head))
        last = group.last if len(group.last) <= room else group.last[: room - 1] + "…"
        line = head + last
        if group.state in ("first", "timeout"):
            line = style.paint(line, BOLD, RED)
        elif group.state in ("failed", "suspect"):
            line = style.paint(line, YELLOW)
        elif echo:
            line = style.paint(line, DIM)
        lines.append(line)
    return lines


def ranks_markdown(rows: Sequence[RankRow], width: int = 100) -> str:
    """The same picture for a Markdown report: a plain text block (alignment kept)."""
    lines = render_ranks(rows, Style(color=False, width=width), width=width)
    if not lines:
        return ""
    body = "\n".join(lines).replace("```", "'''")
    return f"```text\n{body}\n```"
