"""Processes that asked init_process_group for another rank than their launcher gave them.

A script that takes its rank from somewhere the launch does not set (`--local_rank` from the
`torch.distributed.launch` days, default 0; a variable of another launcher) passes the same
`rank=` on every process started without it: they all ask for rank 0. The first owns the store
and waits for the rest of the world; the others cannot open the store's port and exit, or wait
as a rank 0 twice. The ranks nobody asked for are the ones the group waits for, whatever the
processes' RANK says (D1: the launch did not give the rank the script reads). The probe reads
the `rank` argument of init_process_group where a rank waits there, as it reads `world_size`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from triage.core.hang.mismatch import Diagnosis
from triage.core.hang.stacks import RankSample, rank_label

if TYPE_CHECKING:
    from triage.core.hang.analyse import HangPicture


def claimed_apart(picture: HangPicture, samples: Sequence[RankSample]) -> HangPicture:
    """`picture` with the ranks the group waits for read from the ranks the processes asked
    for, where one asked init_process_group for a rank other than its own (by its environment)."""
    world = picture.world_size or 0
    first = picture.diagnoses[0] if picture.diagnoses else None
    if not world or first is None or first.entry not in ("D1", "D20"):
        return picture
    seen = [s for s in samples if s.rank is not None and not s.gone and not s.error]
    apart = [s for s in seen if s.rank_asked is not None and s.rank_asked != s.rank]
    if not apart:
        return picture
    held = {s.rank if s.rank_asked is None else s.rank_asked for s in seen}
    never = tuple(r for r in range(world) if r not in held)
    if not never:
        return picture
    asked = "; ".join(
        f"the process of rank {s.rank} (RANK in its environment) asked init_process_group for rank "
        f"{s.rank_asked}"
        for s in apart
    )
    line = (
        f"{asked}: the script takes its rank from something this launch did not set, so processes "
        f"ask for the same rank (one of them owns the store, the others fail on its port or wait), "
        f"and nobody asks for {rank_label(never)}"
    )
    evidence = (*first.evidence, line)
    return replace(
        picture,
        suspect_ranks=never,
        missing_ranks=never,
        verdict=f"{rank_label(never)} never joined: {line}",
        diagnoses=(
            Diagnosis("D1", evidence),
            *(replace(d, evidence=evidence) for d in picture.diagnoses if d.entry != "D1"),
        ),
    )
