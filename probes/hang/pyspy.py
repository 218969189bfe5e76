"""Reading a live process's Python stack with py-spy, bounded in time, without stopping it.

`py-spy dump --nonblocking` reads the target's memory without pausing it; two reads a moment apart
also tell a rank that is stuck (same stack) from one that is moving.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass, replace

from probes.subproc import run_command
from triage.core.hang.classify import in_distributed, is_library
from triage.core.hang.stacks import Frame, ThreadStack

PTRACE_SCOPE = "/proc/sys/kernel/yama/ptrace_scope"


class StackUnreadable(Exception):
    """The stack could not be read; the message says why and what to change."""


@dataclass(frozen=True)
class Dump:
    """One process's stack as py-spy printed it, and whether it was running."""

    frames: tuple[Frame, ...]
    active: bool
    rank: int | None = None  # read from the stack's arguments, where asked (a spawned rank)
    threads: tuple[ThreadStack, ...] = ()  # the other Python threads, with their stacks
    # init_process_group's world_size argument, where the arguments were read and it waits there
    world_asked: int | None = None
    counters: tuple[tuple[str, str, int], ...] = ()  # the user frames' integer locals, where read
    rank_asked: int | None = None  # init_process_group's rank argument, read as world_asked is
    p2p: tuple[str, int] | None = None  # ("recv", src) / ("send", dst): the peer it waits on there


OVERRIDE_VAR = "TRIAGE_PY_SPY"  # a py-spy to use instead of the one beside python or on PATH


def pyspy_binary() -> str | None:
    """The py-spy executable to use, or None when there is none."""
    override = os.environ.get(OVERRIDE_VAR)
    if override:
        return override if os.access(override, os.X_OK) else None
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return beside if os.access(beside, os.X_OK) else shutil.which("py-spy")


def missing_message() -> str:
    """Why there is no py-spy to run, and what to do."""
    override = os.environ.get(OVERRIDE_VAR)
    if override:
        return f"{OVERRIDE_VAR}={override} is not an executable py-spy, so no stack can be read"
    return "py-spy is not installed, so no stack can be read (pip install py-spy)"


def _ptrace_scope() -> str:
    try:
        with open(PTRACE_SCOPE, encoding="ascii") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def permission_hint(pid: int) -> str:
    """Why py-spy may not attach to `pid`, and what to do about it."""
    scope = _ptrace_scope()
    why = f"kernel.yama.ptrace_scope is {scope}" if scope and scope != "0" else "ptrace is not permitted"
    return (
        f"cannot read the stack of process {pid}: {why}. Run triage as the job's user "
        "(or as root); in a container start it with --cap-add SYS_PTRACE; on the host "
        "`sudo sysctl kernel.yama.ptrace_scope=0` allows it until the next boot"
    )


def _main_thread(threads: list[dict[str, object]], pid: int) -> dict[str, object] | None:
    for thread in threads:
        if thread.get("os_thread_id") == pid or thread.get("thread_name") == "MainThread":
            return thread
    return threads[0] if threads else None


# The argument that holds a spawned rank's number: torch.multiprocessing.spawn's wrapper passes
# the process index as `i`; a multiprocessing.Process target takes it as `rank` by convention.
_SPAWN_WRAPPER = "torch/multiprocessing/spawn.py"
_RANK_ARGUMENTS = ("rank", "global_rank", "world_rank")


def _argument(frame: dict[str, object], names: tuple[str, ...]) -> int | None:
    found = frame.get("locals")
    for item in found if isinstance(found, list) else []:
        if isinstance(item, dict) and item.get("arg") and item.get("name") in names:
            text = str(item.get("repr", "")).strip()
            if text.isdigit():
                return int(text)
    return None


MAX_COUNTERS = 32  # integer locals kept per rank, at most


def counters_of(frames: list[object]) -> tuple[tuple[str, str, int], ...]:
    """The integer locals of the user's own frames, as ("file:line", name, value): the loop
    counters (`epoch`, `step`) that tell ranks waiting at the same line in different iterations.
    Nothing but integers is kept."""
    found: list[tuple[str, str, int]] = []
    for frame in (f for f in frames if isinstance(f, dict)):
        where = f"{frame.get('filename', '')}:{frame.get('line', 0)}"
        if is_library(str(frame.get("filename", ""))) or not isinstance(frame.get("locals"), list):
            continue
        for item in frame["locals"]:
            text = str(item.get("repr", "")).strip() if isinstance(item, dict) else ""
            if text.lstrip("-").isdigit() and len(text) < 19:
                found.append((where, str(item.get("name", "")), int(text)))
    return tuple(found[:MAX_COUNTERS])


def rank_argument(frames: list[object]) -> int | None:
    """The rank a spawned process was given, from its frames' arguments (outermost first)."""
    found = [f for f in reversed(frames) if isinstance(f, dict)]
    for frame in found:
        if frame.get("name") == "_wrap" and str(frame.get("filename", "")).endswith(_SPAWN_WRAPPER):
            return _argument(frame, ("i",))
    mine = (_argument(f, _RANK_ARGUMENTS) for f in found if not is_library(str(f.get("filename", ""))))
    return next((r for r in mine if r is not None), None)


def dump(pid: int, timeout_s: float, nonblocking: bool = True, rank_of: bool = False) -> Dump:
    """The stack of `pid` by py-spy, bounded by `timeout_s`; raises StackUnreadable. `rank_of`
    also reads the arguments, for the rank a spawned process was given (nothing else is kept)."""
    binary = pyspy_binary()
    if binary is None:
        raise StackUnreadable(missing_message())
    command = [binary, "dump", "--json", "--pid", str(pid)]
    if nonblocking:
        command.append("--nonblocking")
    if rank_of:
        command.append("--locals")
    # Tracked like every child of triage: ended with it, whatever signal ends triage.
    done = run_command(command, timeout_s=timeout_s)
    if done.error:
        raise StackUnreadable(f"py-spy could not start: {done.error}")
    if done.timed_out:
        raise StackUnreadable(f"py-spy did not answer within {timeout_s:g} s for process {pid}")
    err = done.stderr
    if done.returncode != 0:
        if "ermission" in err or "not permitted" in err or "os error 1)" in err or "os error 13" in err:
            raise StackUnreadable(permission_hint(pid))
        if "No such process" in err or "os error 3)" in err:
            raise StackUnreadable(f"process {pid} exited")
        first = next((line for line in err.splitlines() if line.startswith("Error")), err.strip()[:200])
        raise StackUnreadable(f"py-spy could not read process {pid}: {first}")
    return parse_dump(done.stdout, pid, rank_of)


MAX_THREADS = 64  # other threads kept per rank, at most


def parse_dump(text: str, pid: int, rank_of: bool = False) -> Dump:
    """`py-spy dump --json` output for `pid` as a Dump: the main thread's stack, and the others'."""
    try:
        threads = json.loads(text)
    except ValueError:
        raise StackUnreadable(f"py-spy gave unreadable output for process {pid}") from None
    main = _main_thread(threads if isinstance(threads, list) else [], pid)
    if main is None:
        raise StackUnreadable(f"process {pid} has no Python thread")
    raw_frames = main.get("frames")
    rank = rank_argument(raw_frames) if rank_of and isinstance(raw_frames, list) else None
    world = world_argument(raw_frames) if rank_of and isinstance(raw_frames, list) else None
    asked = init_argument(raw_frames, "rank") if rank_of and isinstance(raw_frames, list) else None
    counters = counters_of(raw_frames) if rank_of and isinstance(raw_frames, list) else ()
    p2p = p2p_argument(raw_frames) if rank_of and isinstance(raw_frames, list) else None
    others = tuple(
        ThreadStack(
            str(t.get("thread_name") or t.get("os_thread_id") or "?"), _frames(t), bool(t.get("active"))
        )
        for t in threads
        if isinstance(t, dict) and t is not main
    )
    return Dump(
        _frames(main), bool(main.get("active")), rank, others[:MAX_THREADS], world, counters, asked, p2p
    )


_P2P = {"send": "dst", "recv": "src"}


def p2p_argument(frames: list[object]) -> tuple[str, int] | None:
    """Where a rank waits in torch.distributed's blocking `send` / `recv`, the peer it named:
    ("send", dst) or ("recv", src); None elsewhere or where the peer is not an integer."""
    for frame in frames:
        name = frame.get("name") if isinstance(frame, dict) else None
        if (
            name in _P2P
            and isinstance(frame, dict)
            and "torch/distributed/" in str(frame.get("filename", ""))
        ):
            peer = _argument(frame, (_P2P[str(name)],))
            return (str(name), peer) if peer is not None else None
    return None


def _in_init(frame: object) -> bool:
    return (
        isinstance(frame, dict)
        and frame.get("name") == "init_process_group"
        and "torch/distributed/" in str(frame.get("filename", ""))
    )


def world_argument(frames: list[object]) -> int | None:
    """The world_size a rank passed to init_process_group, where it waits in it (-1, the default,
    means WORLD_SIZE from the environment: None)."""
    return init_argument(frames, "world_size")


def init_argument(frames: list[object], name: str) -> int | None:
    """An argument (`world_size`, `rank`) a rank passed to init_process_group, where it waits in it
    (-1, the default, means the environment's value: None)."""
    found = next((f for f in frames if _in_init(f)), None)
    return _argument(found, (name,)) if isinstance(found, dict) else None


def _frames(thread: dict[str, object]) -> tuple[Frame, ...]:
    raw = thread.get("frames")
    return tuple(
        Frame(str(f.get("name", "?")), str(f.get("filename", "?")), int(f.get("line") or 0))
        for f in (raw if isinstance(raw, list) else [])
        if isinstance(f, dict)
    )


def _in_torch(frames: tuple[Frame, ...]) -> bool:
    return in_distributed(frames) or any("/torch/" in f.file for f in frames)


def sample(pid: int, timeout_s: float, gap_s: float = 0.3, rank_of: bool = False) -> tuple[Dump, bool]:
    """Two reads `gap_s` apart: the later one (with the rank the first read found, for `rank_of`),
    and whether the stack moved in between."""
    first = dump(pid, timeout_s, rank_of=rank_of)
    time.sleep(gap_s)
    try:
        second = dump(pid, timeout_s)
    except StackUnreadable:
        return first, False
    moved = second.frames != first.frames or second.active
    world, counters, asked, p2p = first.world_asked, first.counters, first.rank_asked, first.p2p
    if world is None and not counters and not moved and _in_torch(second.frames):
        # waiting while the group forms, how many ranks did it ask for? waiting in a collective (a
        # torch.distributed call, DDP's in backward()), in which iteration of its loops? (its
        # arguments and integer locals, read once)
        with contextlib.suppress(StackUnreadable):
            with_locals = dump(pid, timeout_s, rank_of=True)
            world, counters, asked = with_locals.world_asked, with_locals.counters, with_locals.rank_asked
            p2p = with_locals.p2p
    return (
        replace(second, rank=first.rank, world_asked=world, counters=counters, rank_asked=asked, p2p=p2p),
        moved,
    )
