"""Reading each rank's output as blocks, the way an engineer reads eight ranks' tracebacks.

A Python traceback is one block: the frames say where the rank was (blocked in which collective,
called from which line of the user's code) and the exception line ends it. The same question, where
is each rank waiting, is answered by NCCL's watchdog (`WorkNCCL(SeqNum=5, OpType=ALLREDUCE, ...)`)
and by torch's desync report (`Rank 1 is running collective: CollectiveFingerPrint(...OpType=BARRIER`).

Ranks waiting in different collectives, or in the same collective at different lines of the user's
code, are the signature of a collective only some ranks call (D19/D21) whatever the error text says.

This module is pure: the scanner hands it the lines it sees, one rank at a time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from triage.core.logscan.native_checks import is_call, native_refusal
from triage.core.logscan.prefixes import split_prefix
from triage.core.logscan.static_errors import static_error
from triage.core.logscan.transport import store_wait, transport_wait

MAX_BLOCKS = 400  # blocks kept in full; later ones only update the per-rank wait points

# A Python traceback, or faulthandler's dump of a thread (`Thread 0x... (most recent call first):`).
_TRACEBACK = re.compile(
    r"^\s*(Traceback \(most recent call last\):|(Current t|T)hread 0x[0-9a-f]+ \(most recent call first\):)"
)
# `File "x.py", line 3, in f` (traceback) and `File "x.py", line 3 in f` (faulthandler).
FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+),? in (?P<func>[\w<>.]+)')
_OP_TYPE = re.compile(r"OpType=(?P<op>\w+)")
_FINGERPRINT = re.compile(r"Rank (?P<rank>\d+) is running collective: CollectiveFingerPrint\((?P<body>[^)]*)")
_FAILED = re.compile(r"timeout|timed out|mismatch|failed|error", re.IGNORECASE)  # not a progress line
_FP_OP = re.compile(r"OpType=(?P<op>[A-Z_]+)")

# Library code: a frame in it is not where the user's program stands.
_LIBRARY = re.compile(
    r"(site-packages|dist-packages|[/\\]lib[/\\]python\d|[/\\]lib64[/\\]python\d|^<frozen |^<string>"
    r"|[/\\]torch[/\\](distributed|nn|autograd|_tensor|utils|multiprocessing|cuda)\b"
    r"|[/\\]bin[/\\][\w.-]+$)"  # a console script's stub (`.venv/bin/torchrun`): the launcher's, not the user's
)
# The source line a traceback quotes under its innermost frame when torch's own Python code raised
# (`raise ValueError(`, `raise err_type(err_msg)`): with that frame in torch, torch refused the call
# as the script made it. A re-raise (`raise exception`, a DataLoader worker's error) has no call.
_RAISE = re.compile(r"^\s*raise [A-Za-z_][\w.]*\(")
_TORCH_FILE = re.compile(r"[/\\]torch[/\\]")
# Their C++ twin: c10d's argument checks name the backend and the call (`ProcessGroupGloo::scatter:
# Incorrect input list size 3 ...`); a timeout or a lost peer comes from the transport's own file.
_CPP_CHECK = re.compile(r"^\s*ProcessGroup\w*::\w+: ")
# Not a check: torch's ExceptionWrapper.reraise() (torch/_utils.py) re-raises an error caught in a
# DataLoader worker, the pin-memory thread or a DataParallel replica as `Caught <class> in <where>.`,
# with `raise RuntimeError(msg)` when the original class cannot be rebuilt: the original traceback
# under it holds the cause, so torch's raise there refuses no call.
_RERAISED = re.compile(r"^\s*Caught [A-Za-z_][\w.]* in ")
# The classes torch's argument checks raise (a timeout or a lost peer raises others, or from C++).
CHECK_CLASSES = frozenset({
    "ValueError", "TypeError", "AttributeError", "RuntimeError", "KeyError", "IndexError", "NotImplementedError",
})  # fmt: skip
_BACKWARD_FUNCS = frozenset({"_engine_run_backward", "run_backward"})
_BACKWARD_FILES = ("torch/autograd/", "torch/_tensor.py", "torch\\autograd\\", "torch\\_tensor.py")


def canonical_collective(name: str) -> str | None:
    """One name per collective: `allreduce`, `all_reduce`, `ALLREDUCE`, `_ALLREDUCE_BASE` -> all_reduce."""
    key = name.lower().strip("_")
    for suffix in ("_coalesced", "_into_tensor", "_tensor", "_base", "_object_list", "_object", "_single"):
        key = key.removesuffix(suffix)
    key = key.replace("_", "")
    return _COLLECTIVES.get(key)


_COLLECTIVES = {
    "allreduce": "all_reduce",
    "allgather": "all_gather",
    "reducescatter": "reduce_scatter",
    "broadcast": "broadcast",
    "barrier": "barrier",
    "monitoredbarrier": "barrier",
    "alltoall": "all_to_all",
    "reduce": "reduce",
    "gather": "gather",
    "scatter": "scatter",
    "send": "send",
    "recv": "recv",
    "isend": "send",
    "irecv": "recv",
    "batchisendirecv": "send/recv",
    # every rank of the parent group must call it (a store handshake, then the backend's own connect)
    "newgroup": "new_group",
}


@dataclass
class Block:
    """One traceback of one rank."""

    source: int
    rank: int | None
    line: int  # where it starts (the Traceback line, or its first frame)
    collective: str | None = None  # the innermost collective it is in
    user_frame: str | None = None  # innermost frame of the user's code: `train.py:22 in main`
    exception_line: int | None = None  # the line that ended it
    frames: int = 0
    newest_first: bool = False  # faulthandler's order (most recent call first), not a traceback's
    spawn_parent: bool = False  # mp.spawn's own process, reporting a child's failure from join()
    # a `raise` in torch's own code (the innermost frame) threw: with a check's exception class
    # (CHECK_CLASSES), torch refused the call the script made and the rank was not waiting in it
    raised_by_torch: bool = False
    native_call: bool = False  # the innermost frame is torch's and quotes a call (native_checks.py)
    refused: bool = False  # and the exception that ended the block is of such a class
    native_check: bool = False  # a C++ value or type check under torch's call (native_checks.py)
    _frame_path: str = ""  # the innermost frame so far, and its line in the log
    _frame_at: int = 0


@dataclass(frozen=True)
class WaitPoint:
    """Where one rank was waiting: a collective, and the user's line calling it when a traceback says."""

    rank: int
    collective: str
    where: str  # `train.py:22 in main`, or "" when only a watchdog or desync line names the collective
    line: int
    source: int


@dataclass
class RankReader:
    """Collects blocks and wait points from the lines of every rank."""

    blocks: list[Block] = field(default_factory=list)
    waits: dict[int, WaitPoint] = field(default_factory=dict)  # rank -> its latest wait point
    _open: dict[tuple[int, int | None], Block] = field(default_factory=dict)

    def feed(self, source: int, number: int, rank: int | None, body: str) -> None:
        """Look at one line (already without its launcher prefix)."""
        key = (source, rank)
        if _TRACEBACK.match(body):
            self._close(key)
            self._open[key] = Block(source, rank, number, newest_first="call first" in body)
            return
        frame = FRAME.match(body)
        if frame is not None:
            block = self._open.get(key)
            if block is None:  # a paste that starts in the middle of a traceback
                block = self._open[key] = Block(source, rank, number)
            self._frame(block, frame["file"], int(frame["line"]), frame["func"])
            block._frame_path, block._frame_at = frame["file"], number
            block.native_call = False
            return
        block = self._open.get(key)
        if block is not None and block._frame_at == number - 1 and not block.newest_first:
            if _TORCH_FILE.search(block._frame_path):
                block.raised_by_torch = block.raised_by_torch or _RAISE.match(body) is not None
                block.native_call = is_call(body)
            return
        self._wait_lines(source, number, rank, body)

    def exception(
        self, source: int, number: int, rank: int | None, name: str = "", message: str = ""
    ) -> Block | None:
        """An exception line (of class `name`, saying `message`) ends the rank's open traceback;
        returns that block."""
        block = self._open.pop((source, rank), None)
        if block is None:
            return None
        block.exception_line = number
        if block.collective is None and block.user_frame is not None:
            block.collective = transport_wait(message)  # a wait on a p2p handle (transport.py)
            if block.collective is None and not _LIBRARY.search(block._frame_path):
                block.collective = store_wait(message)  # a key the user's own line waited for
        checked = (block.raised_by_torch and _RERAISED.match(message) is None) or (
            _CPP_CHECK.match(message) is not None and _TORCH_FILE.search(block._frame_path) is not None
        )
        # a call that cannot run as written fails alike on every rank too (static_errors.py)
        block.refused = (checked and name in CHECK_CLASSES) or static_error(name, message)
        block.native_check = native_refusal(name, block.native_call) and not block.refused
        self._keep(block)
        return block

    def finish(self) -> None:
        for key in list(self._open):
            self._close(key)

    def _close(self, key: tuple[int, int | None]) -> None:
        block = self._open.pop(key, None)
        if block is not None and block.frames:
            self._keep(block)

    def _keep(self, block: Block) -> None:
        if len(self.blocks) < MAX_BLOCKS:
            self.blocks.append(block)
        if (
            block.rank is not None
            and block.collective is not None
            and not (block.refused or block.native_check)
        ):
            self.waits[block.rank] = WaitPoint(
                block.rank, block.collective, block.user_frame or "", block.line, block.source
            )

    def _frame(self, block: Block, path: str, line: int, func: str) -> None:
        block.frames += 1
        if block.newest_first and block.user_frame is not None:
            return  # the innermost user frame and what it is inside are known: outer frames add nothing
        normalized = path.replace("\\", "/")
        if func == "join" and normalized.endswith("torch/multiprocessing/spawn.py"):
            block.spawn_parent = True
        if "torch/distributed/" in normalized:
            op = canonical_collective(func)
            if op is not None and not (block.newest_first and block.collective):
                block.collective = op  # the innermost collective
        elif (func in _BACKWARD_FUNCS or func == "backward") and any(
            f in normalized for f in _BACKWARD_FILES
        ):
            block.collective = block.collective or "backward"
        if not _LIBRARY.search(path):
            name = normalized.rsplit("/", 1)[-1]
            block.user_frame = f"{name}:{line} in {func}"
            if not block.newest_first:
                # The user's own code called from inside the operation (a custom autograd
                # Function's backward, a hook): the rank raised there, not waiting in it.
                block.collective = None

    def _wait_lines(self, source: int, number: int, rank: int | None, body: str) -> None:
        """NCCL's watchdog and torch's desync report name the collective a rank is in."""
        if "OpType=" not in body or not _FAILED.search(body):
            return
        # The desync report names the reporting rank's own collective first; what it says about
        # the other rank is often a placeholder (`SequenceNumber=0OpType=REDUCE`).
        fingerprint = _FINGERPRINT.search(body)
        if fingerprint is not None:
            op = _FP_OP.search(fingerprint["body"])
            collective = canonical_collective(op["op"]) if op else None
            if collective is not None:
                reporter = int(fingerprint["rank"])
                self.waits.setdefault(reporter, WaitPoint(reporter, collective, "", number, source))
            return
        op = _OP_TYPE.search(body)
        collective = canonical_collective(op["op"]) if op else None
        if collective is not None and rank is not None:
            self.waits.setdefault(rank, WaitPoint(rank, collective, "", number, source))


def code_above(head: str, line: int) -> str | None:
    """The line of the user's code a traceback quotes just above its error line `line` (1-based),
    read from the kept start of the source (`gpus[hvd.local_rank()]` above `IndexError: list index
    out of range` says what the index was); None when that line is not there or is no code."""
    lines = head.splitlines()
    if not 2 <= line <= len(lines):
        return None
    above = split_prefix(lines[line - 2]).body.strip()
    if not above or FRAME.match(above) or set(above) <= set("^~ ") or len(above) > 300:
        return None
    return above


def mismatch(waits: dict[int, WaitPoint]) -> tuple[WaitPoint, WaitPoint] | None:
    """Two ranks waiting in different collectives, or in one collective called from different
    lines of the user's code: the collectives will never pair up. None when they agree."""
    # The first pair (by rank) that disagrees, found in one pass rather than over every pair: a
    # log can name thousands of ranks.
    points = sorted(waits.values(), key=lambda w: w.rank)
    if not points:
        return None
    first = points[0]
    for other in points[1:]:
        if first.collective != other.collective or (
            first.where and other.where and first.where != other.where
        ):
            return first, other
    if first.where:
        return None  # every other rank has the first one's collective and place, or no place
    placed: WaitPoint | None = None  # the lowest rank that says where it waits
    for other in points[1:]:
        if not other.where:
            continue
        if placed is None:
            placed = other
        elif other.where != placed.where:
            return placed, other
    return None
