"""What one rank is doing, from its stack: which collective it waits in, or what else it does."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from itertools import pairwise
from typing import ClassVar

from triage.core.hang.stacks import Frame, LineContext, RankSample, ThreadStack

# torch.distributed's Python entry points that block until every rank of the group arrives.
COLLECTIVES = frozenset(
    {
        "all_reduce",
        "all_reduce_coalesced",
        "all_gather",
        "all_gather_into_tensor",
        "all_gather_object",
        "all_gather_coalesced",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "all_to_all",
        "all_to_all_single",
        "broadcast",
        "broadcast_object_list",
        "reduce",
        "gather",
        "gather_object",
        "scatter",
        "scatter_object_list",
        "barrier",
        "monitored_barrier",
        "send",
        "recv",
        "batch_isend_irecv",
    }
)
# Calls that wait for the other ranks while the group is being formed.
INIT_CALLS = frozenset(
    {"init_process_group", "new_group", "_new_group_with_tag", "rendezvous", "_store_based_barrier"}
)
_NEW_GROUP = frozenset({"new_group", "_new_group_with_tag", "new_subgroups", "new_subgroups_by_enumeration"})
# Where a rank that writes a checkpoint is, by file: outside any collective, a rank stuck here holds
# the others up in theirs (a full disk, a hung network filesystem, a huge state dict).
_SAVERS = {
    "torch/serialization.py": "torch.save",
    "torch/distributed/checkpoint/": "torch.distributed.checkpoint",
    "safetensors/": "safetensors",
    "transformers/modeling_utils.py": "save_pretrained",
}
_DISTRIBUTED_CALLS = COLLECTIVES | INIT_CALLS
_LIBRARY_MARKS = ("/site-packages/", "/dist-packages/", "<frozen", "/lib/python3")


@dataclass(frozen=True)
class RankState:
    """A rank's state: `kind` is collective | init | data | saving | debugger | stdin | waiting |
    computing | outside | exited | unknown (`outside`: outside any collective, known only from its
    Flight Recorder; `saving`: writing a checkpoint; `debugger`: at a pdb prompt; `stdin`: reading
    its standard input)."""

    rank: int | None
    pid: int
    host: str
    kind: str
    collective: str = ""  # the collective's name, for kind collective / init
    via: str = ""  # who issued it when not the user directly: "DDP backward", "FSDP forward", ...
    user_frame: Frame | None = None
    context: LineContext | None = None
    detail: str = ""
    # The rank tests (`if rank == 0:`) around every user frame of the stack, innermost first, as
    # (file, line of the `if`, test): a collective reached through a call made only on some ranks.
    conditions: tuple[tuple[str, int, str], ...] = ()
    launcher: str = ""  # what started the rank (torchrun, mp.spawn, ...), NO_LAUNCHER, or "" (unknown)
    # Every user frame of the stack with the context of its line, innermost first: the calls that
    # led there, compared with another rank's to find where their paths part.
    path: tuple[tuple[Frame, LineContext | None], ...] = ()
    # The user frames called straight from a user frame (no library code between them), as
    # `file:line`: a decorator's wrapper is called by the line that names the function it wraps.
    direct: frozenset[str] = frozenset()

    NO_LAUNCHER: ClassVar[str] = "none"  # a plain `python` per rank: nothing started the ranks

    def key(self) -> tuple[str, str, str]:
        """Ranks with equal keys are doing the same thing."""
        where = self.user_frame.where() if self.user_frame else ""
        return (self.kind, self.collective, where)

    def describe(self) -> str:
        where = f" at {self.user_frame.where()}" if self.user_frame else ""
        if self.kind in ("collective", "init"):
            via = f" ({self.via})" if self.via else ""
            return f"waiting in {self.collective}(){via}{where}"
        return {
            "data": f"loading data{f' in its {self.detail}' if self.detail else ''}{where}",
            "saving": f"writing a checkpoint ({self.detail}){where}",
            "debugger": f"stopped in {self.detail or 'a debugger (a breakpoint() or set_trace() left in)'}"
            f"{where}",
            "stdin": f"waiting for input on its stdin{where}",
            "waiting": f"waiting outside any collective (sleep, I/O or a lock){where}",
            "computing": f"computing outside any collective{where}",
            "outside": f"in no collective by its Flight Recorder ({self.detail})",
            "exited": f"not running ({self.detail})"
            if self.detail
            else "not running (exited or never started)",
            "unknown": f"stack not readable: {self.detail}",
        }.get(self.kind, self.kind)


def is_library(path: str) -> bool:
    """Whether a frame's file belongs to a library rather than the user's code."""
    return any(mark in path for mark in _LIBRARY_MARKS) or path.startswith("<")


def user_frame(frames: tuple[Frame, ...]) -> Frame | None:
    """The innermost frame of the user's own code."""
    return next((f for f in frames if not is_library(f.file)), None)


def _short(function: str) -> str:
    return function.rsplit(".", 1)[-1]


# A collective issued with async_op=True (and every NCCL collective: the call returns at once and
# the kernel runs on the GPU) is waited for later, in C++ code that leaves no Python frame: the
# rank's innermost frame is the user's line that waits. Python frames of torch.cuda's
# synchronize() are the other way to wait there.
_WAITS = re.compile(r"\.wait\(\s*\)")
_GPU_SYNCS = re.compile(r"\.(item|cpu|tolist|numpy)\(\s*\)|\bsynchronize\(")
# A rank that reads its terminal: under a launcher nobody types there, so it waits for ever.
_READS_STDIN = re.compile(r"(?<![\w.])input\(|\bstdin\.read")
# pdb (and what builds on bdb), or debugpy waiting for an IDE to attach.
_DEBUGGER_FILES = ("/bdb.py", "/pdb.py")
_DEBUGGER_DIRS = ("/pudb/", "/debugpy/", "/pydevd", "/_pydevd_bundle/")
_STORE_VIA = "a key-value store wait: for a key another rank sets"
# An interactive console opened from the code (code.interact, IPython's embed, a shell of the
# user's own built on `cmd.Cmd`, whose cmdloop() reads stdin): a prompt, as pdb's.
_CONSOLE_FILES = ("/code.py", "/cmd.py")
# Libraries' prompts that read the terminal (a password, a confirmation): getpass falls back to
# stdin where there is no terminal, as under a launcher.
_PROMPT_FILES = ("/getpass.py", "/click/termui.py", "/rich/prompt.py")
_CONSOLE_DIRS = ("/IPython/terminal/", "/IPython/core/interactiveshell")
_GPU_VIA = "a GPU sync point: with NCCL, a collective queued before it has not finished"


def _pending(frames: tuple[Frame, ...], context: LineContext | None) -> tuple[str, str] | None:
    """The collective an idle rank waits for outside any torch.distributed call, as (name, via)."""
    if not frames:
        return None
    if frames[0].file.endswith("torch/cuda/__init__.py") and _short(frames[0].function) == "synchronize":
        return "torch.cuda.synchronize", _GPU_VIA
    code = context.code if context is not None and not is_library(frames[0].file) else ""
    if code and context is not None and context.store_call:
        return f"store.{context.store_call}", _STORE_VIA
    if _WAITS.search(code):
        return "Work.wait", "the result of a collective issued with async_op=True"
    found = _GPU_SYNCS.search(code)
    if found:
        return (found.group(1) and f".{found.group(1)}") or "synchronize", _GPU_VIA
    return None


def _conditions(sample: RankSample) -> tuple[tuple[str, int, str], ...]:
    found = []
    for frame in sample.frames:
        context = sample.contexts.get(frame.where()) if not is_library(frame.file) else None
        if context is not None:
            found += [(frame.file, *test) for test in context.rank_conditions]
    return tuple(found)


# torch.distributed.elastic's agent (torchrun, accelerate launch): workers start after the rendezvous.
_RENDEZVOUS = ("torch/distributed/elastic/rendezvous/", "torch/distributed/elastic/agent/")


def _agent(base: RankState, sample: RankSample) -> RankState:
    """A launcher read because it has no worker: waiting in its rendezvous, or doing something else."""
    launcher = sample.launcher or "the launcher"
    if any(m in f.file and "rendezvous" in f.function for f in sample.frames for m in _RENDEZVOUS):
        via = f"{launcher}'s agent: no worker starts until every node has joined"
        return replace(base, kind="init", collective="rendezvous", via=via, launcher=sample.launcher)
    return replace(base, kind="computing" if sample.active else "waiting", launcher=sample.launcher)


# Where a rank waits while its group forms: still connecting to the master's store (the address
# or port cannot be reached yet), or past it, creating the group with its peers (a rank the
# world_size counts has not joined).
CONNECTING = "connecting to the master's store"
JOINING = "past the store: waiting for every rank of its world_size to join"


def _init_step(frames: tuple[Frame, ...]) -> str:
    torch_frames = [f for f in frames if "torch/distributed/" in f.file]
    if not torch_frames:
        return ""
    if any(f.file.endswith("distributed/rendezvous.py") for f in torch_frames):  # _create_c10d_store
        return CONNECTING
    inner = _short(torch_frames[0].function)
    return JOINING if inner in ("_new_process_group_helper", "_store_based_barrier") else ""


def _called(frames: tuple[Frame, ...], inner: Frame) -> str:
    """The collective the caller asked for: the outermost of the torch.distributed collectives
    between `inner` and the caller's code (broadcast_object_list, not the broadcast inside it)."""
    name = _short(inner.function)
    for frame in frames[frames.index(inner) + 1 :]:
        if not is_library(frame.file):
            break
        if "distributed_c10d" in frame.file and _short(frame.function) in COLLECTIVES:
            name = _short(frame.function)
    return name


def _saver(frames: tuple[Frame, ...]) -> str:
    """The checkpoint writer (of _SAVERS) somewhere in the stack, or "" where there is none."""
    return next((_SAVERS[m] for f in frames for m in _SAVERS if m in f.file), "")


def in_distributed(frames: tuple[Frame, ...]) -> bool:
    """Whether a stack waits in a torch.distributed collective or while a group forms."""
    return any("torch/distributed/" in f.file and _short(f.function) in _DISTRIBUTED_CALLS for f in frames)


def _in_thread(base: RankState, sample: RankSample, thread: ThreadStack) -> RankState:
    """The rank as its `thread` shows it: the collective is the thread's, and the main thread's
    frames below it (the `join()` or `result()` that waits for the thread, under its rank tests)
    count as the calls that led there."""
    joined = replace(sample, frames=(*thread.frames, *sample.frames), active=thread.active, threads=())
    state = classify(joined)
    if state.kind not in ("collective", "init"):
        return base
    main = f", the main thread idle at {base.user_frame.where()}" if base.user_frame else ""
    via = f"in thread {thread.name!r}{main}"
    return replace(state, via=f"{state.via}; {via}" if state.via else via)


# Where a main thread waits for another thread: join(), an Event or a Condition, a queue, a
# Future's result(), or the interpreter's exit waiting for non-daemon threads.
_THREAD_WAITS = ("/threading.py", "/queue.py", "/concurrent/futures/")


def _waits_for_thread(frames: tuple[Frame, ...]) -> bool:
    """Also an asyncio event loop idle in its selector: what it awaits may be a call it handed to
    an executor thread (`run_in_executor`, `asyncio.to_thread`)."""
    if frames and frames[0].file.endswith("/selectors.py") and any("/asyncio/" in f.file for f in frames):
        return True
    return not frames or any(mark in frames[0].file for mark in _THREAD_WAITS)


# The interpreter's exit: the main thread's script is over (returned, or raised and printed its
# traceback) and Python waits for the non-daemon threads still running before the process ends.
# Above `threading._shutdown` sit only its exit hooks (`threading._register_atexit`: a
# ThreadPoolExecutor's `_python_exit` joins its workers), never the script's own frames.
# multiprocessing's own exit hook (`util._exit_function`) likewise joins every non-daemon child
# process the script started: one that waits for work nobody will send keeps the rank alive.
_ENDED = "its script ended (returned or raised); a non-daemon thread keeps the process alive"
_ENDED_CHILD = (
    "its script ended (returned or raised); the exit joins a non-daemon child process that never ends"
)
_EXIT_HOOKS = {
    ("_shutdown", "/threading.py"): _ENDED,
    ("_exit_function", "/multiprocessing/util.py"): _ENDED_CHILD,
}


def _script_ended(frames: tuple[Frame, ...]) -> str:
    """Why the main thread's script is over (an exit hook at the bottom of its stack), or ""."""
    last = frames[-1] if frames else None
    return next(
        (
            why
            for (fn, end), why in _EXIT_HOOKS.items()
            if last and last.function == fn and last.file.endswith(end)
        ),
        "",
    )


def classify(sample: RankSample) -> RankState:
    """Name what `sample` is doing, and the user frame that led there: its main thread, or the
    thread that waits in a collective while the main thread waits for a thread (join(), a queue,
    a Future, or the interpreter's exit). A main thread stuck anywhere else is the rank's story
    even when a thread of it sits in a collective; a main thread at the interpreter's exit with no
    thread in a collective is a rank that has ended, as good as gone for the others."""
    state = _classify_main(sample)
    # An exit hook's wait may poll (a child's exit status): the rank has ended, busy or not.
    ended = _script_ended(sample.frames) if state.kind in ("waiting", "computing") else ""
    if not ended and (state.kind != "waiting" or not _waits_for_thread(sample.frames)):
        return state
    thread = next((t for t in sample.threads if in_distributed(t.frames)), None)
    if thread is not None:
        return _in_thread(state, sample, thread)
    return replace(state, kind="exited", detail=ended) if ended else state


# Collectives torch issues from C++ with no torch.distributed Python entry point on the stack: an
# idle thread whose innermost frame is torch's communication code waits for the other ranks there
# (DDP's constructor checks every rank's parameter shapes and broadcasts rank 0's weights; its
# forward broadcasts the buffers, BatchNorm's running statistics, from rank 0).
_COMM_FILES = ("torch/distributed/", "torch/nn/parallel/distributed.py")
_COMM_NAMES = (
    ("broadcast", "broadcast"),
    ("verify_param_shape", "all_gather"),
    ("gather", "all_gather"),
    ("reduce", "all_reduce"),
    ("barrier", "barrier"),
)


def _internal_collective(frames: tuple[Frame, ...]) -> tuple[str, str] | None:
    """(collective, via) for a stack whose innermost frame is torch's communication code."""
    if not frames or not any(m in frames[0].file for m in _COMM_FILES) or "/elastic/" in frames[0].file:
        return None
    inner = _short(frames[0].function).lower()
    name = next((n for mark, n in _COMM_NAMES if mark in inner), inner.lstrip("_"))
    functions = {f.function for f in frames}
    if "DistributedDataParallel.__init__" in functions:
        return name, "DDP constructor: every rank must wrap the model"
    if "DistributedDataParallel.forward" in functions:
        return name, "DDP forward(): buffers broadcast from rank 0 while grad is enabled"
    return name, "inside torch.distributed"


def _classify_main(sample: RankSample) -> RankState:
    """Name what `sample`'s main thread is doing, and the user frame that led there."""
    base = RankState(sample.rank, sample.pid, sample.host, kind="unknown")
    if sample.error:
        return replace(base, kind="exited" if sample.gone else "unknown", detail=sample.error)
    frames = sample.frames
    if sample.role == "agent":
        return _agent(base, sample)
    mine = user_frame(frames)
    base = replace(
        base,
        user_frame=mine,
        context=sample.contexts.get(mine.where()) if mine else None,
        conditions=_conditions(sample),
        launcher=sample.launcher,
        path=tuple((f, sample.contexts.get(f.where())) for f in frames if not is_library(f.file)),
        direct=frozenset(
            f.where() for f, caller in pairwise(frames) if not (is_library(f.file) or is_library(caller.file))
        ),
    )
    # Only above the user's innermost frame: a script run under `python -m pdb` or an IDE's debugger
    # has its frames at the bottom of every stack, and is stopped only when they are on top.
    above = frames[: frames.index(mine)] if mine is not None else frames
    if any(f.file.endswith(_DEBUGGER_FILES) or any(d in f.file for d in _DEBUGGER_DIRS) for f in above):
        return replace(base, kind="debugger")
    if any(
        is_library(f.file) and (f.file.endswith(_CONSOLE_FILES) or any(d in f.file for d in _CONSOLE_DIRS))
        for f in above
    ):
        return replace(
            base,
            kind="debugger",
            detail="an interactive console (code.interact, IPython embed, a cmd.Cmd shell)",
        )
    code = base.context.code if base.context is not None else ""
    if frames and frames[0] is mine and not sample.active and _READS_STDIN.search(code):
        return replace(base, kind="stdin")
    if not sample.active and any(is_library(f.file) and f.file.endswith(_PROMPT_FILES) for f in above):
        return replace(base, kind="stdin")
    fsdp = any("/fsdp/" in f.file for f in frames)
    forming = "new_group" if any(_short(f.function) in _NEW_GROUP for f in frames) else "init_process_group"
    for frame in frames:
        name = _short(frame.function)
        in_dist = "torch/distributed/" in frame.file
        if in_dist and name in INIT_CALLS:
            return replace(base, kind="init", collective=forming, via=_init_step(frames))
        if in_dist and "distributed_c10d" in frame.file and name in COLLECTIVES:
            saver = _saver(frames)
            via = "FSDP" if fsdp else f"inside {saver}" if saver else ""
            return replace(base, kind="collective", collective=_called(frames, frame), via=via)
        if "/fsdp/" in frame.file and not sample.active:
            return replace(base, kind="collective", collective="all_gather", via="FSDP unshard in forward()")
        if frame.file.endswith("autograd/graph.py") and name == "_engine_run_backward" and not sample.active:
            # DDP all-reduces gradients from autograd hooks; an idle main thread in backward() is
            # waiting for that reduction (a backward that computes keeps the thread busy).
            return replace(
                base, kind="collective", collective="all_reduce", via="DDP gradient sync in backward()"
            )
    if any("torch/utils/data/" in f.file for f in frames):
        worker = user_frame(sample.worker_frames)
        if worker is None:
            return replace(base, kind="data")
        # the line that hangs is the worker's (the dataset's __getitem__), not `for batch in loader:`
        context = sample.contexts.get(worker.where())
        detail = f"DataLoader worker PID {sample.worker_pid}"
        return replace(base, kind="data", user_frame=worker, context=context, detail=detail)
    saving = _saver(frames)
    if saving:
        return replace(base, kind="saving", detail=saving)
    internal = _internal_collective(frames) if not sample.active else None
    if internal is not None:
        return replace(base, kind="collective", collective=internal[0], via=internal[1])
    pending = _pending(frames, base.context) if not sample.active else None
    if pending is not None:
        return replace(base, kind="collective", collective=pending[0], via=pending[1])
    return replace(base, kind="computing" if sample.active or sample.moving else "waiting")
