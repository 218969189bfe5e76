"""A rank waiting on its DataLoader: which worker process is stuck, and at which line of the dataset.

The rank's own stack only shows `for batch in loader:`; the line that hangs (a read in
`__getitem__`, a lock, a stalled filesystem) is in a worker, a child process of the rank. Workers
forked from the rank carry a copy of the rank's stack below their loop, so only the frames above
the worker loop are the worker's own.
"""

from __future__ import annotations

import time

from probes.hang.pyspy import StackUnreadable, dump
from triage.core.hang.classify import is_library
from triage.core.hang.stacks import Frame

_LOADER = "torch/utils/data/dataloader.py"
_WORKER_LOOP = "torch/utils/data/_utils/worker.py"
MAX_WORKERS = 16  # workers read per rank, at most


def waits_on_loader(frames: tuple[Frame, ...]) -> bool:
    """Whether a rank's stack is inside a DataLoader's iterator."""
    return any(_LOADER in f.file for f in frames)


def own_frames(frames: tuple[Frame, ...]) -> tuple[Frame, ...]:
    """A worker's frames above its worker loop (innermost first); () for a process that is no worker."""
    loop = next((i for i, f in enumerate(frames) if f.file.endswith(_WORKER_LOOP)), None)
    return frames[:loop] if loop is not None else ()


def stuck_worker(
    children: list[int], timeout_s: float, deadline: float
) -> tuple[int, tuple[Frame, ...]] | None:
    """The first worker among `children` that is inside the user's code (the dataset, a transform),
    with its own frames; None when every worker waits for work, or none could be read in time."""
    for pid in children[:MAX_WORKERS]:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        try:
            frames = own_frames(dump(pid, min(timeout_s, left)).frames)
        except StackUnreadable:
            continue
        if any(not is_library(f.file) for f in frames):
            return pid, frames
    return None
