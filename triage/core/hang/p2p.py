"""Point-to-point sends and receives that name the wrong peer.

A rank blocked in `dist.recv(src=S)` while another rank T (not S) is blocked in `dist.send(dst=`
that rank`)`, and S sends nothing to it: the message it waits for comes from T, so its `src` is
wrong by a rank (a pipeline's "next stage" where the last stage answers, an off-by-one in the
peer's arithmetic). Every other rank then waits on one of these two. A silent freeze a collective
reading cannot name (D19, D21 second as the p2p ops sit under rank tests). The receiving rank is
the odd one. The probe reads each blocked send / recv's peer from the frame's arguments.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from triage.core.hang.mismatch import Diagnosis
from triage.core.hang.stacks import RankSample, rank_label

if TYPE_CHECKING:
    from triage.core.hang.analyse import HangPicture


def crossed_peers(samples: Sequence[RankSample]) -> list[tuple[int, int, int]]:
    """(receiver, the src it names, the rank blocked sending to it) for each receive whose named
    source sends it nothing while another rank's send to it waits."""
    sends = {s.rank: s.p2p[1] for s in samples if s.rank is not None and s.p2p and s.p2p[0] == "send"}
    found = []
    for s in samples:
        if s.rank is None or not s.p2p or s.p2p[0] != "recv":
            continue
        src = s.p2p[1]
        if sends.get(src) == s.rank:
            continue
        sender = next((t for t, dst in sorted(sends.items()) if dst == s.rank and t != src), None)
        if sender is not None:
            found.append((s.rank, src, sender))
    return found


def p2p_apart(picture: HangPicture, samples: Sequence[RankSample]) -> HangPicture:
    """`picture` read again where a blocked recv names another source than the rank blocked
    sending to it (crossed_peers): that receiver is the odd one."""
    if not picture.diagnoses or picture.diagnoses[0].entry not in ("D19", "D21"):
        return picture
    crossed = crossed_peers(samples)
    if not crossed:
        return picture
    odd = tuple(sorted({r for r, _, _ in crossed}))
    line = "; ".join(
        f"rank {r} waits in recv(src={src}) while rank {sender} waits in send(dst={r}), and rank "
        f"{src} sends nothing to rank {r}"
        for r, src, sender in crossed
    )
    why = (
        f"{line}: the source {rank_label(odd)} names is not the rank that sends to it (a peer worked "
        "out wrong by a rank), so both wait for ever and the ranks that wait on them with them"
    )
    evidence = (why, *picture.diagnoses[0].evidence)
    return replace(
        picture,
        suspect_ranks=odd,
        verdict=f"{rank_label(odd)} receives from a rank that is not the one sending to it",
        diagnoses=(Diagnosis("D19", evidence), Diagnosis("D21", evidence)),
    )
