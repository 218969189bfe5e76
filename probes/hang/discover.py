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
from triage.core.hang.classify import RankState

# triage's own processes that carry RANK: itself under a test, and the dist probe's mini-test ranks.
OWN_PROCESS_VARS = ("TRIAGE_HANG_SELF", "TRIAGE_DIST_CHILD")
RANK_VARS = launchers.RANK
LOCAL_RANK_VARS = launchers.LOCAL_RANK
WORLD_VARS = launchers.WORLD_SIZE
LOCAL_WORLD_VARS = launchers.LOCAL_WORLD_SIZE


# A rank started by hand with its rank as an argument (`python train.py --rank 1 --world-size 2`,
# the way the ImageNet example and DeepSpeed's `--local_rank` pass it).
ARGV_RANK = ("--rank", "--global-rank", "--global_rank")
ARGV_LOCAL_RANK = ("--local-rank", "--local_rank")
ARGV_WORLD_SIZE = ("--world-size", "--world_size")


def argv_int(argv: tuple[str, ...], names: tuple[str, ...]) -> int | None:
    """The value of the first option of `names` on a command line (`--rank 1`, `--rank=1`)."""
    for i, word in enumerate(argv[1:], 1):
        option, sep, value = word.partition("=")
        if option in names:
            value = value if sep else (argv[i + 1] if i + 1 < len(argv) else "")
            if value.isdigit():
                return int(value)
    return None


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
        found = self.first(RANK_VARS)
        return found if found is not None else argv_int(self.argv, ARGV_RANK)

    @property
    def local_rank(self) -> int | None:
        found = self.first(LOCAL_RANK_VARS)
        return found if found is not None else argv_int(self.argv, ARGV_LOCAL_RANK)

    @property
    def world_size(self) -> int | None:
        found = self.first(WORLD_VARS)
        return found if found is not None else argv_int(self.argv, ARGV_WORLD_SIZE)

    @property
    def rank_in_env(self) -> bool:
        """Whether the environment says the rank (else, where it is known, the command line does)."""
        return self.first(RANK_VARS) is not None or self.first(LOCAL_RANK_VARS) is not None

    @property
    def is_python(self) -> bool:
        return bool(self.argv) and "python" in os.path.basename(self.argv[0])

    @property
    def launcher(self) -> str | None:
        """Which launcher this process is, from its command line, or None."""
        return launcher_name(self.argv)


# (name, the module a `python -m` runs, the command's own name): how each launcher shows in argv.
_LAUNCHERS = (
    ("torchrun", ("torch.distributed.run", "torch.distributed.launch"), ("torchrun",)),
    ("accelerate launch", ("accelerate.commands.launch", "accelerate.commands.accelerate_cli"), ()),
    ("deepspeed", ("deepspeed.launcher.launch", "deepspeed.launcher.runner"), ("deepspeed", "ds")),
    ("srun", (), ("srun", "slurmstepd")),
    ("mpirun", (), ("mpirun", "mpiexec", "orterun", "prterun")),
)


def launcher_name(argv: tuple[str, ...]) -> str | None:
    """The launcher an argv belongs to: `torchrun ...`, `python -m torch.distributed.run ...`,
    `accelerate launch ...`, `deepspeed train.py`, `python -m deepspeed.launcher.launch ...`, `srun`."""
    words = [os.path.basename(a) for a in argv[:3]]
    # `python /venv/bin/torchrun ...`: the script a python runs counts as the command
    command = words[1] if len(words) > 1 and words[0].startswith("python") else (words[0] if words else "")
    modules = [argv[i + 1] for i, a in enumerate(argv[:4]) if a == "-m" and i + 1 < len(argv)]
    if command == "accelerate" and "launch" in argv[1:4]:
        return "accelerate launch"
    for name, launcher_modules, commands in _LAUNCHERS:
        if command in commands or any(m in launcher_modules for m in modules):
            return name
    return None


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


def is_spawn_child(proc: Proc) -> bool:
    """A process started by multiprocessing's spawn method (what torch.multiprocessing.spawn uses)."""
    return "--multiprocessing-fork" in proc.argv and any("spawn_main" in a for a in proc.argv)


def _uses_torch(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/maps", "rb") as handle:
            return any(b"/libtorch" in line for line in handle)
    except OSError:
        return False


def started_as(proc: Proc, procs: dict[int, Proc]) -> str:
    """How multiprocessing started `proc` from a Python parent: SPAWN (the spawn method, what
    torch.multiprocessing.spawn uses), FORK (a `multiprocessing.Process` forked, Linux's default:
    the child keeps its parent's command line), or "" (not a child multiprocessing started)."""
    parent = procs.get(proc.ppid)
    if parent is None or not parent.is_python:
        return ""
    if is_spawn_child(proc):
        return SPAWN
    return FORK if parent.argv == proc.argv else ""


def _comm(pid: int) -> str:
    return (_read(f"/proc/{pid}/comm") or b"").decode(errors="replace").strip()


def _tcp_inodes() -> set[str]:
    """The socket inodes of this network namespace's established TCP connections."""
    found: set[str] = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in (_read(name) or b"").decode(errors="replace").splitlines()[1:]:
            fields = line.split()
            if len(fields) > 9 and fields[3] == "01":
                found.add(fields[9])
    return found


def _connected(pid: int) -> bool:
    """Whether `pid` holds an established TCP connection (a rank's store or gloo/NCCL peers)."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")[:4096]
    except OSError:
        return False
    links = []
    for fd in fds:
        try:
            links.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:  # closed since the listing
            continue
    sockets = {link[8:-1] for link in links if link.startswith("socket:[")}
    return bool(sockets & _tcp_inodes()) if sockets else False


# A DataLoader worker names itself so (torch/utils/data/_utils/worker.py): forked, never a rank.
_LOADER_WORKER = "pt_data_worker"


def spawned_rank(proc: Proc, procs: dict[int, Proc]) -> bool:
    """A rank that multiprocessing started (`torch.multiprocessing.spawn`, or a
    `multiprocessing.Process` spawned or forked) that runs torch: its rank is an argument of its
    function, not a variable of its environment. The children of such a rank (DataLoader
    workers) are not ranks; a forked child is one only when it is no DataLoader worker and it is
    connected (a pool of workers forked for preprocessing is not)."""
    how = started_as(proc, procs)
    parent = procs.get(proc.ppid)
    if not how or parent is None or parent.rank is not None or started_as(parent, procs):
        return False
    if how == FORK and (_comm(proc.pid) == _LOADER_WORKER or not _connected(proc.pid)):
        return False
    return _uses_torch(proc.pid)


def _named_rank(proc: Proc, procs: dict[int, Proc]) -> bool:
    """A process the user names that runs torch with no rank in its environment and no rank or
    launcher below it: `init_process_group(rank=..., world_size=...)` called with arguments."""
    return (
        proc.is_python
        and not proc.launcher
        and not any(mark in proc.env for mark in OWN_PROCESS_VARS)
        and not any(c.launcher for c in descendants(proc.pid, procs))
        and _uses_torch(proc.pid)
    )


def _is_rank(proc: Proc, procs: dict[int, Proc]) -> bool:
    if not proc.is_python or any(mark in proc.env for mark in OWN_PROCESS_VARS):
        return False
    if proc.rank is None and proc.local_rank is None:
        return spawned_rank(proc, procs)
    if not proc.rank_in_env and not _uses_torch(proc.pid):  # `--rank` of something else
        return False
    return _rank_ancestor(proc, procs) is None and not leftover_child(proc, procs)


def _ancestors(pid: int, procs: dict[int, Proc]) -> list[int]:
    """The PIDs above `pid` in the process tree, its parent first (the last may be unreadable)."""
    found: list[int] = []
    proc = procs.get(pid)
    while proc is not None and proc.ppid and proc.ppid not in found and len(found) < 64:
        found.append(proc.ppid)
        proc = procs.get(proc.ppid)
    return found


def leftover_child(proc: Proc, procs: dict[int, Proc]) -> bool:
    """A rank's child that outlived it: a forked process keeps its rank's RANK and LOCAL_RANK, and
    when the rank dies it is reparented to init or a subreaper, above where the job's ranks were
    started. So a process with a rank in its environment is a leftover child, not a rank, where
    its parent is no launcher and is a strict ancestor of the parent of a rank of the same job (the
    shell loop or launcher the ranks still have). Ranks that all lost their launcher share their
    new parent and stay ranks; a job with one rank here has nothing to compare with."""
    key = job_key(proc, procs)
    parent = procs.get(proc.ppid)
    if not (key[1] or key[2]) or (parent is not None and parent.launcher):
        return False
    above = _ancestors(proc.pid, procs)
    for mate in procs.values():
        if mate.pid == proc.pid or mate.ppid == proc.ppid or not mate.is_python:
            continue
        if mate.rank is None and mate.local_rank is None:
            continue
        if mate.pid in above or _rank_ancestor(mate, procs) is not None:
            continue
        if proc.ppid in _ancestors(mate.ppid, procs) and job_key(mate, procs) == key:
            return True
    return False


def leftover_children(ranks: list[Proc], procs: dict[int, Proc]) -> list[Proc]:
    """The leftover children (see leftover_child) of the jobs of `ranks`, by PID."""
    keys = {job_key(r, procs) for r in ranks}
    found = (p for p in procs.values() if p.rank_in_env and p.is_python and job_key(p, procs) in keys)
    return sorted((p for p in found if leftover_child(p, procs)), key=lambda p: p.pid)


def _rank_ancestor(proc: Proc, procs: dict[int, Proc]) -> Proc | None:
    """A Python ancestor of `proc` with its RANK and LOCAL_RANK, below any launcher: `proc` is that
    rank's own child (a DataLoader worker, or a tool it started through a shell: `sh -c "python
    server.py | grep READY"` passes the rank's environment on), not a rank."""
    seen: set[int] = set()
    parent = procs.get(proc.ppid)
    while parent is not None and parent.pid not in seen and len(seen) < 64 and not parent.launcher:
        if parent.is_python and parent.rank == proc.rank and parent.local_rank == proc.local_rank:
            return parent
        seen.add(parent.pid)
        parent = procs.get(parent.ppid)
    return None


# Where no launcher process is seen (its node's agent, another container), the variables it set.
_LAUNCHER_VARS = (
    ("TORCHELASTIC_RUN_ID", "torchrun"),
    ("SLURM_PROCID", "srun"),
    ("OMPI_COMM_WORLD_RANK", "mpirun"),
    ("PMI_RANK", "mpirun"),
)
SPAWN = "torch.multiprocessing.spawn"
FORK = "multiprocessing (fork)"
NO_LAUNCHER = RankState.NO_LAUNCHER


def launcher_label(proc: Proc, procs: dict[int, Proc]) -> str:
    """What started rank `proc`: a launcher's name, mp.spawn's, or NO_LAUNCHER for a plain `python`."""
    found = launcher_of(proc, procs)
    if found is not None:
        return found.launcher or ""
    how = started_as(proc, procs)
    if how:
        return how
    return next((name for var, name in _LAUNCHER_VARS if var in proc.env), NO_LAUNCHER)


def launcher_of(proc: Proc, procs: dict[int, Proc]) -> Proc | None:
    """The nearest ancestor of `proc` that is a launcher (torchrun's agent, accelerate, deepspeed, srun)."""
    seen: set[int] = set()
    parent = procs.get(proc.ppid)
    while parent is not None and parent.pid not in seen and len(seen) < 64:
        if parent.launcher:
            return parent
        seen.add(parent.pid)
        parent = procs.get(parent.ppid)
    return None


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


def job_key(proc: Proc, procs: dict[int, Proc]) -> tuple[str, str, str]:
    """What the ranks of one job share: the mp.spawn (or multiprocessing) parent that started them,
    else the launcher's run id and the master's address and port."""
    env = proc.env
    how = started_as(proc, procs) if proc.rank is None else ""
    if how:  # the ranks one mp.spawn (or multiprocessing) started
        return (how, str(proc.ppid), "")
    return (env.get("TORCHELASTIC_RUN_ID", ""), env.get("MASTER_ADDR", ""), env.get("MASTER_PORT", ""))


def job_mates(proc: Proc, procs: dict[int, Proc]) -> list[Proc]:
    """Every rank of `proc`'s job on this machine (`proc` itself included): those of the same
    mp.spawn, or those that meet at the same master address and port. A rank whose job nothing
    names (its address in the script's own init_method) stands for itself."""
    key = job_key(proc, procs)
    if not key[1] and not key[2]:
        return [proc]
    return [
        p for p in procs.values() if p.pid == proc.pid or (_is_rank(p, procs) and job_key(p, procs) == key)
    ]


def find_ranks(pids: list[int] | None = None, procs: dict[int, Proc] | None = None) -> list[Proc]:
    """Rank processes: those of the PIDs given, else all. A launcher's PID stands for its ranks,
    and a rank's PID for every rank of its job here (the one a user picks from `ps` or `top`)."""
    procs = all_procs() if procs is None else procs
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
            if leftover_child(proc, procs):  # a dead rank's child stands for the ranks of its job
                key = job_key(proc, procs)
                proc = next(
                    (p for p in procs.values() if _is_rank(p, procs) and job_key(p, procs) == key), proc
                )
            found = [p for p in (proc, *descendants(proc.pid, procs)) if _is_rank(p, procs)]
            if found and found[0] is proc:
                found = job_mates(proc, procs)
            if not found and _named_rank(proc, procs):
                found = [proc]
            chosen.update((p.pid, p) for p in found)
        return sorted(chosen.values(), key=lambda p: (p.rank if p.rank is not None else 1 << 30, p.pid))
    ranks = [p for p in procs.values() if _is_rank(p, procs)]
    return sorted(ranks, key=lambda p: (p.rank if p.rank is not None else 1 << 30, p.pid))


def find_agents(pids: list[int] | None, procs: dict[int, Proc]) -> list[Proc]:
    """Launchers with no rank below them (torchrun's agent still in its rendezvous, waiting for the
    other nodes before it starts any worker): those of the PIDs given, or all of this user's."""
    chosen = [procs[p] for p in pids or [] if p in procs]
    candidates = (
        [c for p in chosen for c in (p, *descendants(p.pid, procs))] if pids else list(procs.values())
    )
    agents = {
        p.pid: p
        for p in candidates
        if p.launcher and p.is_python and not any(mark in p.env for mark in OWN_PROCESS_VARS)
    }
    busy = {a for a in agents if any(_is_rank(c, procs) for c in descendants(a, procs))}
    # one agent per chain: a python `torchrun` started by `accelerate launch` is the same launch
    return sorted(
        (a for pid, a in agents.items() if pid not in busy and a.ppid not in agents), key=lambda a: a.pid
    )
