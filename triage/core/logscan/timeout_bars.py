"""A data-preparation progress bar cut off, by a failure, after running as long as a default
collective timeout: the rank that tokenised or mapped the dataset kept the others waiting.

The pattern behind many "NCCL timeout" threads about fine-tuning scripts: one rank (the main process
in `main_process_first`, rank 0 in `torch_distributed_zero_first`) tokenises, groups or caches the
dataset while every other rank waits in a barrier. The wait is a collective with a deadline; when the
preparation takes longer, the waiting ranks time out and the job dies. Pastes often hold only the
preparation bar and a traceback that starts right after it (the timeout's own line cut off, or the
traceback truncated before its error line), so no signature names the failure. The bar itself does:
its elapsed time (`[30:09<33:25, ...]`) equals the deadline the waiting ranks had, 30 minutes (the
default process-group timeout and Hugging Face's `ddp_timeout`) or 10 minutes (older NCCL defaults
and several launchers'). A bar that stopped short of 100 % at that age, with the failure right
behind it, is the preparation outliving the others' wait (MN3), whatever the truncated tail says.
"""

from __future__ import annotations

import re

from triage.core.logscan.prefixes import split_prefix
from triage.core.logscan.rules import Inferred

TIMEOUT = "MN3"
# As sure as a timeout's own signature: the elapsed time says which deadline ran out.
AT_TIMEOUT_SCORE = 0.95
# Default deadlines (seconds), with how far short of one and past it the bar may read: the waiting
# ranks' clock started before the bar's (the raw dataset loads first), and the bar redraws until
# the failure reaches its rank (minutes, when the timed-out ranks' teardown is slow).
_DEADLINES = ((1800, 90, 180), (600, 30, 60))
# tqdm's bar: `desc:  47%|████▊     | 1695000/3634744 [30:09<33:25, 967.30 examples/s]`
_BAR = re.compile(
    r"(?P<desc>[A-Za-z][^|\r\n]{0,100}?):?\s*(?P<pct>\d{1,3})%\|[^|\r\n]{0,200}\|\s*"
    r"[\d.]+[kKMG]?/[\d.]+[kKMG]?\s*\[(?P<elapsed>(?:\d{1,3}:)?\d{1,2}:\d{2})<"
    r"[^\]\r\n]{0,60}\](?P<after>[^\r\n]*)"
)
# What the bar does: preparing data, not training, evaluating or loading a checkpoint.
_PREPARATION = re.compile(
    r"tokeni[sz]|\bmap\b|group(?:ing)? texts|filter|pre-?process|cach(?:e|ing)|pack(?:ing)?\b"
    r"|convert(?:ing)?\b|format(?:ting)?\b|dataset|examples?/s",
    re.IGNORECASE,
)
# What follows the cut-off bar: a traceback or an error, not more progress.
_FAILURE = re.compile(
    r"Traceback \(most recent call last\)|^\s*File \"|(?:Error|Exception)\b|Watchdog caught|timed? ?out",
    re.IGNORECASE,
)


def preparation_at_timeout(heads: list[str]) -> list[Inferred]:
    """MN3 when a data-preparation bar stopped short of 100 % after running as long as a default
    collective timeout, and a traceback or an error follows it directly."""
    for head in heads:
        lines = head.splitlines()
        for index, line in enumerate(lines):
            body = split_prefix(line).body
            last = None
            for found in _BAR.finditer(body):  # a line of redraws: the last one is what it came to
                last = found
            if last is None or int(last["pct"]) >= 100:
                continue
            text = f"{last['desc']} {body[last.end('elapsed') :]}"
            if not _PREPARATION.search(text):
                continue
            seconds = _seconds(last["elapsed"])
            deadline = next((d for d, early, late in _DEADLINES if -early <= seconds - d <= late), None)
            if deadline is None:
                continue
            if not _failure_follows(last["after"], lines[index + 1 :]):
                continue
            desc = last["desc"].strip()[-60:]
            return [
                Inferred(
                    TIMEOUT,
                    AT_TIMEOUT_SCORE,
                    (),
                    f"the data-preparation bar ({desc!r}) stopped at {last['pct']} % after"
                    f" {last['elapsed']}, the length of the default {deadline // 60}-minute"
                    " collective timeout, and the failure follows it: one rank was still preparing"
                    " the data while the others waited in a collective until their deadline ran out",
                    True,
                )
            ]
    return []


def _failure_follows(after: str, rest: list[str]) -> bool:
    """What comes right after the bar (on its line, else the next non-empty line) is a traceback or
    an error, not another redraw of a bar."""
    if not after.strip():
        after = next((split_prefix(line).body for line in rest if line.strip()), "")
        if _BAR.search(after):
            return False
    return _FAILURE.search(after) is not None


def _seconds(elapsed: str) -> int:
    total = 0
    for part in elapsed.split(":"):
        total = total * 60 + int(part)
    return total
