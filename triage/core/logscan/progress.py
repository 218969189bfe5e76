"""The ranks' own progress counters, read from the start of each source: `batch 3/4`, a tqdm bar's
`2/3`, `step 10/250`. When the same counter (the same words around it) counts to different totals
on different ranks, the ranks run different numbers of batches, and a failure in such a log is the
rank with more batches meeting a peer that has left its loop (D9), whatever collective each one
happened to be in when it was caught.

Each counter is told apart by the words of its line (numbers, bars and the rank itself left out)
and its place among the line's fractions; a line's rank comes from its launcher prefix or, failing
that, from the `rank N` the program printed itself. Progress bars redraw with a carriage return,
so a line is split there too.
"""

from __future__ import annotations

import re
from collections import defaultdict

from triage.core.logscan.prefixes import split_prefix
from triage.core.logscan.rules import Inferred

UNEVEN = "D9"
# Over the collective mismatch that uneven loops show (rules.MISMATCH_SCORE, 1.1) and a timeout's
# own signature: the ranks' counters say why they ended up in different collectives.
UNEVEN_TOTALS_SCORE = 1.2
_FRACTION = re.compile(r"(?<![\w./:-])(?P<done>\d{1,7})/(?P<total>\d{1,7})(?![\w./:-])")
_OWN_RANK = re.compile(r"\brank[ _:=#]?(?P<rank>\d{1,5})\b", re.IGNORECASE)
_WORD = re.compile(r"[A-Za-z]{2,}")


def uneven_totals(heads: list[str]) -> list[Inferred]:
    """D9 when one progress counter counts to different totals on different ranks."""
    totals: dict[tuple[str, int], dict[int, set[int]]] = defaultdict(lambda: defaultdict(set))
    for head in heads:
        for line in re.split(r"[\r\n]+", head):
            split = split_prefix(line)
            own = _OWN_RANK.search(split.body)
            rank = split.rank if split.rank is not None else (int(own["rank"]) if own else None)
            if rank is None:
                continue
            body = _OWN_RANK.sub(" ", split.body)
            words = " ".join(w.lower() for w in _WORD.findall(body))
            for place, fraction in enumerate(_FRACTION.finditer(body)):
                done, total = int(fraction["done"]), int(fraction["total"])
                if 0 < done <= total and total > 1:
                    totals[(words, place)][rank].add(total)
    for (words, _), by_rank in totals.items():
        single = {rank: next(iter(seen)) for rank, seen in by_rank.items() if len(seen) == 1}
        if len(single) < 2 or len(set(single.values())) < 2:
            continue
        shown = ", ".join(f"rank {rank}: {total}" for rank, total in sorted(single.items())[:4])
        counter = f" ({words[:40]!r})" if words else ""
        return [
            Inferred(
                UNEVEN,
                UNEVEN_TOTALS_SCORE,
                (),
                f"the ranks' progress counter{counter} counts to different totals ({shown}): the ranks"
                " run different numbers of batches, and the one with more waits for a peer that has left",
                True,
            )
        ]
    return []
