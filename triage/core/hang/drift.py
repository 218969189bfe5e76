"""Ranks that wait at the same line in different iterations of a loop around it.

Every rank in the same collective at the same line looks like a collective that does not
complete; but gloo pairs any two collectives that come next in the ranks' sequences, so ranks
whose sequences drifted apart (one ran fewer batches per epoch, one skipped a call) can meet again
at the same line in different iterations. The ranks' loop counters (their integer locals, read by
the probe) tell them apart: the outermost loop whose counter differs is where they drifted.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from triage.core.hang.mismatch import Diagnosis
from triage.core.hang.paths import data_header
from triage.core.hang.stacks import RankSample, rank_label

if TYPE_CHECKING:
    from triage.core.hang.analyse import HangPicture

_TARGETS = re.compile(r"^for (.+?) in ")
_NAME = re.compile(r"[A-Za-z_]\w*")


def _loops(picture: HangPicture) -> list[tuple[str, str, list[str]]]:
    """The `for` loops around the ranks' common line, outermost first, as ("file:line" of the
    frame whose function runs the loop, its header, the loop's target names)."""
    found: list[tuple[str, str, list[str]]] = []
    for frame, ctx in reversed(picture.groups[0].state.path):
        for _, _, header in ctx.blocks if ctx else ():
            targets = _TARGETS.match(header)
            if targets:
                found.append((frame.where(), header, _NAME.findall(targets.group(1))))
    return found


def drifted(picture: HangPicture, samples: Sequence[RankSample]) -> HangPicture:
    """`picture` (every rank at one line, nobody named) with the ranks that are in another
    iteration of a loop around that line named, where their loop counters say so."""
    if picture.suspect_ranks or not picture.diagnoses or len(picture.groups) != 1:
        return picture
    states = picture.ranks
    if picture.groups[0].state.kind != "collective" or len({s.path for s in states}) != 1:
        return picture
    counters = {s.rank: {(w, n): v for w, n, v in s.counters} for s in samples if s.rank is not None}
    if len(counters) < 2:
        return picture
    loops = _loops(picture)
    for index, (where, header, names) in enumerate(loops):
        for name in names:
            values = {rank: found.get((where, name)) for rank, found in counters.items()}
            if None in values.values() or len(set(values.values())) < 2:
                continue
            return _named(picture, header, name, values, [h for _, h, _ in loops[index + 1 :]])
    return picture


def _named(
    picture: HangPicture, header: str, name: str, values: dict[int, int | None], inner: list[str]
) -> HangPicture:
    top = max(v for v in values.values() if v is not None)
    ahead = tuple(sorted(r for r, v in values.items() if v == top))
    behind = tuple(sorted(r for r, v in values.items() if v != top))
    odd = behind if 0 < len(behind) < len(ahead) else ahead
    at = ", ".join(f"rank {r} at {name}={v}" for r, v in sorted(values.items()))
    state = picture.groups[0].state
    line = (
        f"every rank waits in {state.collective}() at "
        f"{state.user_frame.where() if state.user_frame else '?'}, but in different iterations of "
        f"`{header}` ({at}): their sequences of collectives drifted apart and each call paired with "
        "another iteration's"
    )
    data = next((h for h in inner if data_header(h)), "")
    if data and odd == ahead:
        line += f"; {rank_label(ahead)} got through more of them, with fewer turns of `{data}` each"
        entries = ("D9", "D19")
        verdict = f"{rank_label(ahead)} ran fewer batches per iteration of `{header}` than the others"
    else:
        entries = ("D19", "D9")
        verdict = f"{rank_label(odd)} drifted to another iteration of `{header}` than the others"
    evidence = (line, *picture.diagnoses[0].evidence)
    return replace(
        picture,
        suspect_ranks=odd,
        verdict=verdict,
        diagnoses=tuple(Diagnosis(e, evidence) for e in entries),
    )
