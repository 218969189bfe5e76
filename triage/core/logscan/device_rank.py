"""A GPU chosen by the global rank: `invalid device ordinal` under code that passes the rank.

`CUDA error: invalid device ordinal` says only that a process asked for a GPU its host does not
have. Two causes print it: more processes than GPUs on one host (E5), and a process that picks
its GPU by its global rank (D3), which is right on the first node and past the last GPU on every
other. The traceback tells them apart: the line of code it quotes just above the error names the
index the process asked for. `set_device(local_rank)` or `args.gpu` is the first case;
`set_device(rank)`, `Device(self.hvd_rank)`, `f"cuda:{rank}"` or any call handed the global rank
is the second, whatever the call is named.
"""

from __future__ import annotations

import re

from triage.core.logscan.prefixes import split_prefix
from triage.core.logscan.rules import Inferred
from triage.core.logscan.scanner import OWN_ERROR_KINDS, Event, Scan

GLOBAL_RANK_DEVICE = "D3"
# Above E5's signature on the same line (its weight plus the first-failure bonus): the code the
# traceback quotes is the stronger evidence of the two.
SCORE = 1.2
_ORDINAL = re.compile(r"invalid device ordinal|cudaErrorInvalidDevice", re.IGNORECASE)
# The global rank handed to a call: a bare or attribute `rank`, `global_rank`, Horovod's and c10d's
# getters, the environment's RANK; `local_rank`, `LOCAL_RANK`, `rank_in_node` are not it.
_GLOBAL = re.compile(
    r"[(,{=]\s*(?:\w+\.)?(?:global_rank|hvd_rank|rank)\s*[,)}]"
    r"|\bhvd\.rank\(\)|\bget_rank\(\)|\[[\"']RANK[\"']\]",
)
_LOCAL = re.compile(r"local|node", re.IGNORECASE)
_QUOTED = 6  # traceback lines looked at above the error: its frame and the code under it


def global_rank_device(events: list[Event], scan: Scan) -> Inferred | None:
    """D3 when an `invalid device ordinal` error comes right under a line of code that passes the
    global rank to a call; None otherwise (the ordinal error alone stays E5's)."""
    for event in events:
        if event.kind not in OWN_ERROR_KINDS and event.kind != "hit":
            continue
        if not _ORDINAL.search(event.text) or event.source >= len(scan.heads):
            continue
        code = _rank_call_above(scan.heads[event.source], event.line)
        if code is not None:
            reason = (
                f"the traceback's code above the device error passes the global rank ({code.strip()[:80]}):"
                " every host past the first asks for a GPU it does not have"
            )
            return Inferred(GLOBAL_RANK_DEVICE, SCORE, (event,), reason, True)
    return None


def _rank_call_above(head: str, line: int) -> str | None:
    lines = head.splitlines()
    if not 1 <= line <= len(lines):
        return None
    for text in reversed(lines[max(0, line - 1 - _QUOTED) : line - 1]):
        body = split_prefix(text).body
        if "Error" in body or 'File "' in body or _LOCAL.search(body):
            continue
        if _GLOBAL.search(body):
            return body
    return None
