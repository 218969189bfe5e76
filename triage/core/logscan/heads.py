"""Patterns read from the start of each source (the first 16 KiB the scanner keeps), not from a
single line: what a person sees scrolling the top of a paste.

- the same lines printed once per rank: every rank prints progress (D23), also where Ray folded the
  copies into one line (`[repeated 7x across cluster]`); a process announcing
  the same global rank twice: each node formed a group of its own (D2);
- torchrun's launch configuration asking for several nodes with its rendezvous on localhost:
  every node meets only itself (D2);
- ranks announcing themselves as members of a group (`GLOBAL_RANK: 3, MEMBER: 4/8`) while the
  others never do, in a log where nothing failed: the job froze setting up, waiting for processes
  that were never launched (another node's, P3);
- frames of several processes' tracebacks glued into one line, or the lines of several ranks'
  tracebacks alternating (`--tee 3`, every rank failing at once): the ranks wrote to one terminal
  at once, and the error that ends each traceback may be lost in the mix (P4).
"""

from __future__ import annotations

import re
from collections import Counter

from triage.core.logscan.prefixes import split_prefix
from triage.core.logscan.rules import Inferred

SAME_RANK_TWICE = "D2"  # two processes announce the same global rank: separate groups per node
LOCAL_RENDEZVOUS = "D2"  # several nodes asked for, the rendezvous on localhost
EVERY_RANK_PRINTS = "D23"  # the same lines printed once per rank
INTERLEAVED = "P4"  # tracebacks of several processes mixed into one another
NEVER_LAUNCHED = "P3"  # members of the group that never announced themselves: not launched

RANK_TWICE_SCORE = 0.8
LOCAL_RENDEZVOUS_SCORE = 0.8
DUPLICATES_SCORE = 0.55  # a finding only when nothing else is: duplicated output is not a crash
INTERLEAVED_SCORE = 0.5  # likewise: mixed tracebacks hide the cause, they are not one
MISSING_MEMBERS_SCORE = 0.6  # a finding only where the log shows no failure of its own
MIN_DUPLICATED = 2  # distinct lines printed more than once before the output counts as duplicated
MIN_GLUED = 2  # lines with a frame glued behind other text before the tracebacks count as mixed
# times the output turns from one rank's open traceback to another's before they count as mixed
# (one rank's traceback printed whole, then the next one's, turns at most once per rank)
MIN_TURNS = 4
# Lines every rank prints by design (tracebacks, NCCL's and torch's own logs, separators): their
# repetition says nothing about the user's program. torchrun's summary is printed once per agent,
# so a job of several nodes repeats it (`x.py FAILED`, `Root Cause (first observed failure):`).
_NOT_OUTPUT = re.compile(
    r"^\s*(File \"|Traceback|\^+$|~+$|-+$|=+$|\*+$|\[?[IWEF]\d{4} |NCCL |(\w+\.)*\w*(Error|Exception|Warning)\b"
    r"|(time|host|rank|exitcode|error_file|traceback)\s+: "  # torchrun's summary, one block per failed rank
    r"|Root Cause \(first observed failure\):|Failures:|<NO_OTHER_FAILURES>|\S+ FAILED\s*$)"
)
# Python's warnings (`.../functional_tensor.py:368: UserWarning: Failed to initialize NumPy`, then the
# source line it quotes): every process prints its imports' warnings once, whoever prints progress.
_PY_WARNING = re.compile(r"^\S+\.py:\d+: \w*Warning: ")
# A process announcing which rank it is: the same announcement twice means two processes both
# believe they are that rank (a single-node launch repeated on every node). nccl-tests prints its
# header (`# nThread 1 nGpus 8 minBytes ...`) once per job: twice, each process ran a job alone.
_RANK_ANNOUNCEMENT = re.compile(
    r"GLOBAL_RANK:?\s*\d+|MEMBER:\s*\d+/\d+|\bglobal rank\s*:?\s*\d+|^#\s*nThread \d+ nGpus \d+",
    re.IGNORECASE,
)
# Lightning's (and NeMo's) announcement: `initializing ddp: GLOBAL_RANK: 3, MEMBER: 4/8`.
_MEMBER = re.compile(r"GLOBAL_RANK:\s*(?P<rank>\d+),\s*MEMBER:\s*\d+/(?P<size>\d+)")
# torchrun's launch configuration (LOGLEVEL=INFO): `min_nodes        : 2`, `rdzv_endpoint    : localhost:10010`
_MIN_NODES = re.compile(r"\bmin_nodes\s*: (?P<n>\d+)\s*$")
_LOCAL_ENDPOINT = re.compile(
    r"\brdzv_endpoint\s*: (?P<host>localhost|127\.\d+\.\d+\.\d+|\[?::1\]?)(?::\d+)?\s*$"
)
# Ray's log deduplication folds the same line from several workers into one copy and says how many
# more there were: `... [repeated 7x across cluster]` (Ray Train, vLLM, verl, OpenRLHF).
_RAY_REPEATED = re.compile(r"\s*\[repeated (?P<n>\d{1,6})x across cluster\]\s*$")
# A frame that does not start its line: another process's output ran into it.
_GLUED_FRAME = re.compile(r"\S\s*File \"[^\"]{1,300}\", line \d+")
_TRACEBACK_START = re.compile(r"^\s*Traceback \(most recent call last\):")
# the exception line that ends a traceback block (`TypeError: ...`, `torch.distributed.DistError`)
EXCEPTION_NAME = r"(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt)\b"
_TRACEBACK_END = re.compile(f"^{EXCEPTION_NAME}")


def from_heads(heads: list[str], quiet: bool = False) -> list[Inferred]:
    """The diagnoses the start of the sources shows; `quiet`: the log shows no failure at all."""
    found = _duplicated_output(heads)
    found.extend(_local_rendezvous(heads))
    found.extend(_interleaved(heads))
    if not quiet:
        from triage.core.logscan.progress import uneven_totals  # progress.py builds on Inferred too

        found.extend(uneven_totals(heads))
    from triage.core.logscan.nccl_coll import diverged_collectives  # builds on Inferred too
    from triage.core.logscan.timeout_bars import preparation_at_timeout  # builds on Inferred too

    found.extend(diverged_collectives(heads))
    found.extend(preparation_at_timeout(heads))
    if quiet and not found:
        found.extend(_missing_members(heads))
    return found


def _missing_members(heads: list[str]) -> list[Inferred]:
    """Ranks announced as members of a group of N while the others never announce themselves."""
    announced: set[int] = set()
    size = 0
    for head in heads:
        for match in _MEMBER.finditer(head):
            announced.add(int(match["rank"]))
            size = max(size, int(match["size"]))
    missing = size - len({r for r in announced if r < size})
    if not announced or missing <= 0:
        return []
    shown = ", ".join(str(r) for r in sorted(announced)[:8])
    return [
        Inferred(
            NEVER_LAUNCHED,
            MISSING_MEMBERS_SCORE,
            (),
            f"ranks {shown} announced themselves as members of a group of {size}; {missing} never did, and"
            " nothing failed: the job waits for processes that were never launched (another node's)",
            False,
        )
    ]


def _duplicated_output(heads: list[str]) -> list[Inferred]:
    """Every rank printing the same progress lines: the start of the log shows lines (without
    their rank prefix) repeated, as one copy per rank prints them."""
    counts: Counter[str] = Counter()
    for head in heads:
        under_frame: set[int | None] = set()  # ranks whose previous line was a traceback frame
        in_error: set[int | None] = set()  # ranks whose previous line was (part of) an exception's
        counted: dict[int | None, tuple[str, int]] = {}  # ranks whose previous line was counted
        for line in head.splitlines():
            split = split_prefix(line)
            body = split.body.strip()
            last = counted.pop(split.rank, None)
            if last is not None and _TRACEBACK_START.match(body):
                # a message followed by its traceback (`logger.exception`, a library reporting an
                # error it recovers from): each process reports its own error, no progress line
                counts[last[0]] -= last[1]
            # the source line a traceback prints under each frame: every rank's traceback has it;
            # so are the indented lines of a multi-line exception message (`\tMissing key(s) in
            # state_dict: ...` under `RuntimeError: Error(s) in loading state_dict`)
            indented = (split.body if split.rank is not None else line)[:1].isspace()
            quoted = split.rank in under_frame or (split.rank in in_error and indented)
            under_frame.discard(split.rank)
            if _TRACEBACK_END.match(body) or (quoted and split.rank in in_error):
                in_error.add(split.rank)
            else:
                in_error.discard(split.rank)
            if body.startswith('File "') or _PY_WARNING.match(body):
                under_frame.add(split.rank)
                if not body.startswith('File "'):
                    continue
            folded = _RAY_REPEATED.search(body)
            copies = 1 + int(folded["n"]) if folded else 1
            if folded:
                body = body[: folded.start()]
            if len(body) >= 20 and not quoted and not _NOT_OUTPUT.match(body):
                counts[body] += copies
                counted[split.rank] = (body, copies)
    repeated = [line for line, n in counts.items() if n > 1]
    announced = [line for line in repeated if _RANK_ANNOUNCEMENT.search(line)]
    if announced:
        return [
            Inferred(
                SAME_RANK_TWICE,
                RANK_TWICE_SCORE,
                (),
                f"two processes announce the same place in the job ({announced[0][:80]!r}): each node"
                " formed a group of its own",
                True,
            )
        ]
    if len(repeated) < MIN_DUPLICATED or sum(counts[line] for line in repeated) * 2 < sum(counts.values()):
        return []
    return [
        Inferred(
            EVERY_RANK_PRINTS,
            DUPLICATES_SCORE,
            (),
            f"{len(repeated)} lines are printed more than once, as when every rank prints them: {repeated[0][:80]!r}",
            False,
        )
    ]


def _local_rendezvous(heads: list[str]) -> list[Inferred]:
    """torchrun told to wait for several nodes at a rendezvous on this host's loopback."""
    for head in heads:
        nodes = endpoint = None
        for line in head.splitlines():
            body = split_prefix(line).body
            nodes = nodes or _MIN_NODES.search(body)
            endpoint = endpoint or _LOCAL_ENDPOINT.search(body)
        if nodes is not None and endpoint is not None and int(nodes["n"]) > 1:
            return [
                Inferred(
                    LOCAL_RENDEZVOUS,
                    LOCAL_RENDEZVOUS_SCORE,
                    (),
                    f"torchrun waits for {nodes['n']} nodes at a rendezvous on {endpoint['host']}:"
                    " each node can only meet itself there",
                    True,
                )
            ]
    return []


def _interleaved(heads: list[str]) -> list[Inferred]:
    """Traceback frames glued behind other text, or the lines of several ranks' open tracebacks
    alternating: several processes wrote to one stream at once."""
    glued = sum(
        1 for head in heads for line in head.splitlines() if _GLUED_FRAME.search(split_prefix(line).body)
    )
    turns = sum(_turns(head) for head in heads)
    if glued < MIN_GLUED and turns < MIN_TURNS:
        return []
    how = (
        f"{glued} lines hold a traceback frame glued behind other output"
        if glued >= MIN_GLUED
        else f"the lines of several ranks' tracebacks alternate ({turns} turns from one rank's to another's)"
    )
    return [
        Inferred(
            INTERLEAVED,
            INTERLEAVED_SCORE,
            (),
            f"{how}: several processes' tracebacks are mixed, and the error that ends each may be lost",
            False,
        )
    ]


def _turns(head: str) -> int:
    """How often the output turns from a line of one rank's open traceback to another rank's."""
    open_blocks: set[int] = set()
    previous: int | None = None
    turns = 0
    for line in head.splitlines():
        split = split_prefix(line)
        if split.rank is None:
            continue
        if _TRACEBACK_START.match(split.body):
            open_blocks.add(split.rank)
        if split.rank not in open_blocks:
            continue
        if previous is not None and previous != split.rank and previous in open_blocks:
            turns += 1
        previous = split.rank
        if _TRACEBACK_END.match(split.body):
            open_blocks.discard(split.rank)
    return turns
