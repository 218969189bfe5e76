"""NCCL's own trace of every collective (NCCL_DEBUG=INFO with NCCL_DEBUG_SUBSYS=COLL): the ranks'
n-th collective on a communicator must be the same call with the same count and datatype.

Each line names the process (`host:pid:tid [dev]`), the collective, its sequence number on that
communicator (`opCount`), the element count and datatype, and the communicator's size
(`[nranks=N]`). When one process's collective number k is an AllGather and another's an
AllReduce, or they broadcast different counts, the ranks have diverged: NCCL pairs them anyway
and the job hangs or corrupts data with no error of its own. That trace is what the desync
toolkit (D19) asks for; the divergence in it is the finding.

A process in two communicators of one size counts each on its own: an opCount that a single
process shows with two different calls is such a case and is not compared.
"""

from __future__ import annotations

import re
from collections import defaultdict

from triage.core.logscan.rules import Inferred

DIVERGED = "D19"
# As the collective mismatch torch's own desync check reports (rules.MISMATCH_SCORE, 1.1): the
# same finding, from NCCL's side.
DIVERGED_SCORE = 1.1
_COLL = re.compile(
    r"(?P<host>[\w.-]+):(?P<pid>\d+):\d+ \[\d+\] NCCL INFO (?P<op>\w+): opCount (?P<seq>[0-9a-f]+)"
    r" .*?\bcount (?P<count>\d+) datatype (?P<dtype>\d+)\b.*?\[nranks=(?P<nranks>\d+)\]"
)

Call = tuple[str, str, str]  # collective, count, datatype


def diverged_collectives(heads: list[str]) -> list[Inferred]:
    """D19 when two processes' NCCL traces show different calls at one opCount of one group size."""
    calls: dict[tuple[str, str], dict[tuple[str, str], set[Call]]] = defaultdict(lambda: defaultdict(set))
    for head in heads:
        if "opCount" not in head:
            continue  # the common case: no collective trace at all
        for match in _COLL.finditer(head):
            key = (match["nranks"], match["seq"])
            calls[key][(match["host"], match["pid"])].add((match["op"], match["count"], match["dtype"]))
    for (nranks, seq), by_process in calls.items():
        single = {proc: next(iter(seen)) for proc, seen in by_process.items() if len(seen) == 1}
        if len(single) < 2 or len(set(single.values())) < 2:
            continue
        shown = "; ".join(
            f"{host}:{pid} {op} count {count} datatype {dtype}"
            for (host, pid), (op, count, dtype) in sorted(single.items())[:4]
        )
        return [
            Inferred(
                DIVERGED,
                DIVERGED_SCORE,
                (),
                f"NCCL's collective trace shows the ranks' collective {seq} (of a group of {nranks})"
                f" called differently ({shown}): the ranks have diverged, so the collectives never"
                " pair up as meant",
                True,
            )
        ]
    return []
