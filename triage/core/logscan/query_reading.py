"""The query engine's reading of a log's errors: what a rank printed in its own words.

A signature names a failure by a line it has seen before; an error no signature knows is still a
rank's own account of why it stopped. The log engine hands those lines (each exception with the
line of code its traceback quotes above it) to the query engine, as a user's description:
- when no signature names any failure (verdict._fall_back);
- when the only findings are generic symptoms (a watchdog timeout, a SIGKILL, a traceback that
  seems missing) while the first failing rank printed an error of its own (verdict._own_reading):
  the rank's own words name the cause; the symptoms only show that something failed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from triage.core.logscan.blocks import code_above
from triage.core.logscan.rules import is_launcher
from triage.core.logscan.scanner import OWN_ERROR_KINDS, Event, Scan
from triage.core.logscan.unfinished import unfinished_frames

if TYPE_CHECKING:
    from triage.core.matcher import Hit
    from triage.core.model import KnowledgeBase

FALLBACK_CHARS = 6000  # text handed to the query engine when no signature fires
# The query engine's threshold is fitted on users' descriptions, where content-free text must get
# no answer. What the log fallback hands it is a log's own errors, which are never content-free:
# on the train logs that no signature names (bench/fit_log_fallback.py, each part also scored
# without the signatures written from it), every answer at 0.64 or above was right but one, and
# nearly every one under 0.6 wrong. So the fallback answers from LOG_THRESHOLD on, whatever the
# engine's own threshold.
LOG_THRESHOLD = 0.6
# (A weak answer below it for a rank's own error, from 0.3 with a clear lead, was tried: on the
# train logs, their parts scored without their own signatures, and the new parts it was right
# about none.) The first failing rank's own reading (verdict._own_reading) needs LOG_THRESHOLD
# and a clear lead: the runner-up under OWN_ERROR_LEAD of the best.
OWN_ERROR_LEAD = 0.8
# The query engine's calibrated score reads as "how often an answer this strong is right": the
# fallback answers where the engine itself would (its fitted threshold), and only once the log
# shows that it comes from the stack triage knows (DOMAIN).
# Words that say a log comes from distributed PyTorch (or its launchers and libraries). A paste
# with none of them (a Java server's bind error, a Flask traceback, npm) gets no diagnosis from
# words alone, however many words it shares with an entry ("port", "address already in use").
DOMAIN = re.compile(
    r"\b(torch\w*|c10d?|nccl\w*|gloo|cuda\w*|cudnn|gpus?|deepspeed|accelerate|horovod|hvd|megatron"
    r"|nemo|lightning|pytorch_lightning|transformers|fsdp|ddp|torchrun|mpirun|srun|slurm|nvidia\S*"
    r"|multiprocessing|local_rank|world_size|master_addr|master_port|rank\d*|net/(socket|ib|plugin)|apex|xla|tensorflow"
    # Open MPI's and MPICH's runtimes (mpirun's daemons), the model libraries built on torch, and
    # torch's C++ symbols as a linker prints them (`_ZN3c104cuda9SetDeviceEi`)
    r"|orte|ompi|orted|open ?mpi|pmix|mpich|hydra|flash_attn\w*|xformers|triton|bitsandbytes|vllm|sglang"
    r"|colossalai|peft|_ZN\w*c10\w*)\b",
    re.IGNORECASE,
)


def fallback_text(scan: Scan, events: list[Event]) -> str:
    """What the query engine reads when no signature fires: the errors the ranks printed (not the
    launcher's reports, not echoes), each exception with the line of code its traceback quotes
    above it, or when the scan found none the deepest frames of a traceback the paste cut off (see
    unfinished.py), else the start of the log."""
    parts: list[str] = []
    seen: set[str] = set()
    for event in events:
        wanted = event.kind in OWN_ERROR_KINDS or (event.kind == "hit" and not event.echo)
        if wanted and not event.echo and not is_launcher(event) and event.text not in seen:
            seen.add(event.text)
            code = code_above(scan.heads[event.source], event.line) if event.kind == "exception" else None
            if code and code not in seen:
                seen.add(code)
                parts.append(code)
            parts.append(event.text)
    if not parts:
        # a traceback cut off before its error: its deepest frames, not the banners around it
        cut = [frames for head in scan.heads if (frames := unfinished_frames(head))]
        parts = cut + [head for head in scan.heads if head.strip()]
    return "\n".join(parts)[:FALLBACK_CHARS]


def clear_lead(hits: Sequence[Hit], floor: float) -> bool:
    """The best entry reaches the floor and the runner-up is well behind it."""
    if not hits or hits[0].score < floor:
        return False
    return len(hits) < 2 or hits[1].score <= OWN_ERROR_LEAD * hits[0].score


def in_domain(text: str, scan: Scan, kb: KnowledgeBase | None = None) -> bool:
    """Whether the text, or the start of a source, says it comes from the stack triage knows."""
    if DOMAIN.search(text) is not None or any(DOMAIN.search(head) for head in scan.heads):
        return True
    if kb is None:
        return False
    from triage.core.matcher import index_for

    index = index_for(kb)
    return index.in_domain(text.lower()) or any(index.in_domain(head.lower()) for head in scan.heads)


def own_text(scan: Scan, events: list[Event], first: Event) -> str:
    """The errors the first failing rank printed itself (its exception with the code above it)."""
    mine = [e for e in events if e.rank == first.rank and e.kind in OWN_ERROR_KINDS]
    return fallback_text(scan, mine or [first])
