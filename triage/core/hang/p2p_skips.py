"""Point-to-point exchanges that stop matching because one side skipped an iteration.

Where every rank waits in a send or a receive (a pipeline's stages, a hand-rolled scatter) and no
receive names the wrong peer (p2p.py), the ops stopped pairing up: one side issued fewer of them.
A rank whose blocked op sits in a loop holding a guarded `continue` (`if (labels != -100).sum() ==
0: continue`, a micro-batch with nothing to learn from) skipped that iteration's send / recv on
its own data while its peer did not: the stages ran different numbers of micro-batches (D9, D19
second; D20 first where the test is for a value gone NaN or inf). The skipping rank is the odd one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from triage.core.hang.mismatch import Diagnosis
from triage.core.hang.p2p import crossed_peers
from triage.core.hang.stacks import RankSample, rank_label

if TYPE_CHECKING:
    from triage.core.hang.analyse import HangPicture

_P2P = frozenset({"send", "recv", "isend", "irecv", "batch_isend_irecv"})
_NON_FINITE = re.compile(r"isfinite|isnan|isinf|\bnan\b|\binf\b", re.I)


def p2p_skipped(picture: HangPicture, samples: Sequence[RankSample]) -> HangPicture:
    """`picture` read again where every rank waits in a point-to-point op, none names a wrong
    peer, and some (not all) of them wait in a loop with a guarded `continue`: those skipped."""
    ranks = [r for r in picture.ranks if r.rank is not None]
    if (
        len(ranks) < 2
        or picture.suspect_ranks
        or not all(r.collective in _P2P for r in ranks)
        or crossed_peers(samples)
        or not picture.diagnoses
        or picture.diagnoses[0].entry not in ("D19", "D21")
    ):
        return picture
    skipping = {
        r.rank: r.context.skips[0]
        for r in ranks
        if r.rank is not None and r.context is not None and r.context.skips
    }
    if not skipping or len(skipping) == len(ranks):
        return picture
    odd = tuple(sorted(skipping))
    line, test = next(iter(skipping.values()))
    non_finite = _NON_FINITE.search(test) is not None
    why = (
        f"every rank waits in a point-to-point send or receive and none names a wrong peer; "
        f"{rank_label(odd)} waits in a loop whose `continue` at line {line} under `if {test}:` skips "
        "the rest of an iteration, its send / recv with it, so the two sides issued different "
        "numbers of them"
        + (": its values went NaN or inf" if non_finite else ", on a test of data only it sees")
    )
    evidence = (why, *picture.diagnoses[0].evidence)
    entries = ("D20", "D9") if non_finite else ("D9", "D19")
    return replace(
        picture,
        suspect_ranks=odd,
        verdict=f"{rank_label(odd)} skipped a point-to-point exchange (`if {test}: continue`) its peer did not",
        diagnoses=tuple(Diagnosis(e, evidence) for e in entries),
    )
