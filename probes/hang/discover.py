"""Finding the training job on this machine: launchers and their rank processes, from /proc.

Read-only: cmdline, environ (readable only for the user's own processes, which is the point), and
the parent of each process. A rank is a Python process with RANK or LOCAL_RANK in its environment
whose parent does not carry the same RANK (that excludes DataLoader workers and compile workers,
which inherit the variables).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from triage.core import launchers

LAUNCHER_MARKS = (
    "torchrun",
    "torch.distributed.run",
    "torch.distributed.launch",
    "accelerate",
    "deepspeed",
    "srun",
)
RANK_VARS = launchers.RANK
LOCAL_RANK_VARS = launchers.LOCAL_RANK
WORLD_VARS = launchers.WORLD_SIZE
LOCAL_WORLD_VARS = launchers.LOCAL_WORLD_SIZE


@dataclass(frozen=True)
class Proc:
    """A process read from /proc: its parent, command line and environment."""

    pid: int
    ppid: int
    argv: tuple[str, ...]
    env: dict[str, str]
    readable: bool = True  # False when the environment is another user's (not ours to read)

    def first(self, names: tuple[str, ...]) -> int | None:
        return launchers.first_int(self.env, names)

    @property
    def rank(self) -> int | None:
        return self.first(RANK_VARS)

    @property
    def local_rank(self) -> int | None:
        return self.first(LOCAL_RANK_VARS)

    @property
    def is_python(self) -> bool:
        return bool(self.argv) and "python" in os.path.basename(self.argv[0])

    @property
    def is_launcher(self) -> bool:
        return any(mark in arg for arg in self.argv[:3] for mark in LAUNCHER_MARKS)


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read(1 << 20)
    except OSError:
        return None


def read_proc(pid: int) -> Proc | None:
    """The process, or None when it is gone or not ours to read."""
    cmdline = _read(f"/proc/{pid}/cmdline")
    stat = _read(f"/proc/{pid}/stat")
    if not cmdline or not stat:
        return None
    fields = stat.rsplit(b")", 1)[-1].split()
    if not fields or fields[0] == b"Z":
        return None
    environ = _read(f"/proc/{pid}/environ")
    if environ is None:
        return Proc(
            pid,
            int(fields[1]),
            tuple(a.decode(errors="replace") for a in cmdline.split(b"\0") if a),
            {},
            readable=False,
        )
    env = {}
    for item in environ.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    argv = tuple(a.decode(errors="replace") for a in cmdline.split(b"\0") if a)
    return Proc(pid, int(fields[1]), argv, env)


def started_at(pid: int) -> float | None:
    """When the process started, in seconds since the epoch (from /proc/PID/stat and the boot time)."""
    stat, boot = _read(f"/proc/{pid}/stat"), _read("/proc/stat")
    if not stat or not boot:
        return None
    fields = stat.rsplit(b")", 1)[-1].split()
    btime = next((line.split()[1] for line in boot.splitlines() if line.startswith(b"btime ")), b"")
    try:
        return int(btime) + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (ValueError, IndexError, OSError):
        return None


def all_procs() -> dict[int, Proc]:
    """Every process this user may read, by pid (this process excluded)."""
    procs = {}
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != me:
            proc = read_proc(int(entry))
            if proc is not None:
                procs[proc.pid] = proc
    return procs


def _is_rank(proc: Proc, procs: dict[int, Proc]) -> bool:
    if not proc.is_python or (proc.rank is None and proc.local_rank is None):
        return False
    if "TRIAGE_HANG_SELF" in proc.env:
        return False
    parent = procs.get(proc.ppid)
    return not (
        parent is not None
        and parent.is_python
        and parent.rank == proc.rank
        and parent.local_rank == proc.local_rank
    )


def descendants(root: int, procs: dict[int, Proc]) -> list[Proc]:
    """The processes below `root` in the process tree, parents first."""
    children: dict[int, list[Proc]] = {}
    for proc in procs.values():
        children.setdefault(proc.ppid, []).append(proc)
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child.pid)
    return found


def find_ranks(pids: list[int] | None = None) -> list[Proc]:
    """Rank processes: those of the PIDs given (a launcher's PID stands for its ranks), else all."""
    procs = all_procs()
    if pids:
        chosen: dict[int, Proc] = {}
        for pid in pids:
            proc = procs.get(pid)
            if proc is None:
                raise LookupError(f"process {pid} does not exist")
            if not proc.readable:
                raise PermissionError(
                    f"process {pid} belongs to another user, so its environment and stack cannot be read: "
                    "run triage as the job's user (or as root)"
                )
            if _is_rank(proc, procs):
                chosen[pid] = proc
            for child in descendants(pid, procs):
                if _is_rank(child, procs):
                    chosen[child.pid] = child
        return sorted(chosen.values(), key=lambda p: (p.rank if p.rank is not None else 1 << 30, p.pid))
    ranks = [p for p in procs.values() if _is_rank(p, procs)]
    return sorted(ranks, key=lambda p: (p.rank if p.rank is not None else 1 << 30, p.pid))
