"""Ranks in a rooted collective (gather, scatter, reduce, broadcast, their `_object` forms) that
disagree on its root.

`dist.gather(t, bucket, dst=writer)` where each rank computed `writer` from values of its own (a
count of the samples it kept, a rotation by its own step): ranks that name different roots never
meet in the same call. Two of them wait at the same line with different values of the name
passed as `dst` / `src` (read from their integer locals, as the probe reads loop counters); the
ranks whose value differs from the one most ranks hold are the odd ones (D19: the ranks'
arguments to one collective differ; D21 second, a collective whose partners differ by rank).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from triage.core.hang.mismatch import Diagnosis
from triage.core.hang.stacks import RankSample, rank_label

if TYPE_CHECKING:
    from triage.core.hang.analyse import HangPicture

ROOTED = frozenset(
    {"gather", "gather_object", "scatter", "scatter_object_list", "reduce", "broadcast"}
    | {"broadcast_object_list"}
)
# `dst=writer`, `src=self_owner`: a root passed by name (a constant root cannot differ by rank).
_ROOT_ARG = re.compile(r"\b(?P<arg>dst|src|group_dst|group_src)\s*=\s*(?P<name>[A-Za-z_]\w*)\b(?!\s*[.(\[])")


def _values(
    picture: HangPicture, samples: Sequence[RankSample], file: str, function: str, name: str
) -> dict[int, int]:
    """Each rank's integer value of `name` in its frame of `function` (in `file`), where read."""
    counters = {s.rank: {(w, n): v for w, n, v in s.counters} for s in samples if s.rank is not None}
    found: dict[int, int] = {}
    for state in picture.ranks:
        held = counters.get(state.rank) if state.rank is not None else None
        if state.rank is None or held is None:
            continue
        for frame, _ in state.path:
            if (frame.file, frame.function) == (file, function) and (frame.where(), name) in held:
                found[state.rank] = held[(frame.where(), name)]
                break
    return found


def disagreed_root(picture: HangPicture, samples: Sequence[RankSample]) -> HangPicture:
    """`picture` with the ranks named that pass another root than most to a rooted collective
    two or more ranks wait in at the same line, where their locals say so."""
    if not picture.diagnoses or any(s.kind != "collective" for s in picture.ranks):
        return picture
    for group in picture.groups:
        state, frame = group.state, group.state.user_frame
        found = _ROOT_ARG.search(state.context.code) if state.context and frame else None
        if frame is None or found is None or state.collective not in ROOTED or len(group.ranks) < 2:
            continue
        values = _values(picture, samples, frame.file, frame.function, found.group("name"))
        if len({values.get(r) for r in group.ranks if r is not None} - {None}) < 2:
            continue
        return _named(picture, state.collective, found.group("arg"), found.group("name"), values)
    return picture


def _named(picture: HangPicture, collective: str, arg: str, name: str, values: dict[int, int]) -> HangPicture:
    (top, most), *rest = Counter(values.values()).most_common()
    unique = not rest or rest[0][1] < most
    odd = tuple(sorted(r for r, v in values.items() if v != top)) if unique else ()
    held = ", ".join(f"rank {r} {name}={v}" for r, v in sorted(values.items()))
    line = (
        f"the ranks pass different roots to {collective}({arg}={name}): {held}; each rank computed "
        f"`{name}` from values of its own, so the ranks that name different roots never meet in one call"
    )
    evidence = (line, *picture.diagnoses[0].evidence)
    return replace(
        picture,
        suspect_ranks=odd,
        verdict=(
            f"{rank_label(odd)} {'passes' if len(odd) == 1 else 'pass'} another {arg} to {collective}() "
            "than the other ranks"
            if odd
            else f"the ranks disagree on the {arg} of {collective}()"
        ),
        diagnoses=(Diagnosis("D19", evidence), Diagnosis("D21", evidence)),
    )
