"""Reproductions that really hang: real torch jobs on CPU/gloo that freeze the way users see it.

Each runs under torchrun with a long collective timeout, so it stays frozen while `triage hang`
looks at it; `hung_job` starts one, waits until every rank is stuck, and ends every process it
started on the way out (by the token in their environment), whatever happens in between.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from probes.hang.discover import all_procs, leftover_child, read_proc
from triage.repro import HERE
from triage.repro.runner import (
    _SCRUB,
    TOKEN_VAR,
    accelerate_launch,
    by_hand,
    end_processes,
    free_port,
    processes_with_token,
)

MARKER = "# the suspect stops here"
WAIT_MARKER = "# the others wait here"
WITH_RECORDERS = HERE / "with_recorders.py"


@dataclass(frozen=True)
class HangScenario:
    """A hang reproduction that stays hung for `triage hang` to read."""

    id: str
    title: str
    script: str
    expect: str  # the entry `triage hang` must name first
    suspects: tuple[int, ...]
    nproc: int = 2
    gone: bool = False  # the suspects have exited: no process, no line, the others wait for them
    launcher: str = "torch.distributed.run"  # one of LAUNCHERS, "python" (one per rank) or "script"
    world: int = 0  # the WORLD_SIZE the ranks are given, where it is not nproc (ranks never started)
    busy: bool = False  # the suspects keep computing: only the others go quiet
    idle_ticks: int = 0  # CPU ticks a frozen rank still uses between reads (init retrying to connect)
    nnodes: int = 1  # nodes the launcher expects; only this one is started (no worker starts at all)
    env: tuple[tuple[str, str], ...] = ()  # variables the script reads (its knobs)
    collective: str = ""  # the collective the suspects wait in, where the test checks it
    ended: bool = False  # the suspects' scripts ended (raised) but a thread keeps their process alive
    rank_pid: bool = False  # the test reads the job from a rank's PID (the others' by it), not the launcher's

    @property
    def path(self) -> str:
        return str(HERE / self.script)

    @property
    def running(self) -> int:
        """How many rank processes the hung job has."""
        if self.nnodes > 1:
            return 0
        return self.nproc - (len(self.suspects) if self.gone and not self.world else 0)

    @property
    def marks_waiting(self) -> bool:
        """Whether the script marks the line the other ranks wait at."""
        with open(self.path, encoding="utf-8") as handle:
            return WAIT_MARKER in handle.read()

    def suspect_line(self) -> int:
        """The line the suspect ranks stop at, marked in the script."""
        return self._marked(MARKER)

    def waiting_line(self) -> int:
        """The line the other ranks wait at, where the script marks it."""
        return self._marked(WAIT_MARKER)

    def _marked(self, marker: str) -> int:
        with open(self.path, encoding="utf-8") as handle:
            for number, text in enumerate(handle, 1):
                if marker in text:
                    return number
        raise LookupError(f"{self.script} has no `{marker}` marker")


HANGS: tuple[HangScenario, ...] = (
    HangScenario(
        "D21", "a barrier inside `if rank == 0:` while rank 1 trains on", "hang_rank0_barrier.py", "D21", (0,)
    ),
    HangScenario(
        "D9", "DDP with fewer batches on rank 0: it waits past its loop", "hang_uneven.py", "D9", (0,)
    ),
    HangScenario(
        "MN3", "rank 1 stuck reading a sample while rank 0 waits", "hang_dataloader.py", "MN3", (1,)
    ),
    HangScenario(
        "MN3-worker",
        "rank 1's DataLoader worker is stuck reading a sample (num_workers=2) while rank 0 waits",
        "hang_dataloader.py",
        "MN3",
        (1,),
        env=(("HANG_LOADER_WORKERS", "2"),),
    ),
    HangScenario(
        "D19", "rank 2 issues its collectives in another order", "hang_order.py", "D19", (2,), nproc=3
    ),
    HangScenario(
        "D19-skip",
        "rank 1 catches an exception and skips the barrier",
        "hang_caught_exception.py",
        "D19",
        (1,),
    ),
    HangScenario(
        "MN3-save",
        "rank 0's checkpoint write stalls while rank 1 waits in the barrier after it",
        "hang_checkpoint.py",
        "MN3",
        (0,),
    ),
    HangScenario(
        "MN3-async",
        "rank 1 stuck reading a sample while rank 0 waits on an async all_reduce (as NCCL ranks do)",
        "hang_async_wait.py",
        "MN3",
        (1,),
    ),
    HangScenario(
        "D20-gone",
        "rank 1 returns before joining the group (exit 0); rank 0 waits in init_process_group",
        "hang_rank_gone.py",
        "D20",
        (1,),
        gone=True,
    ),
    HangScenario(
        "P8-pdb",
        "a pdb.set_trace() left in halts rank 0 at a prompt nobody answers; rank 1 waits in all_reduce",
        "hang_breakpoint.py",
        "P8",
        (0,),
    ),
    HangScenario(
        "D21-call",
        "rank 0 waits in the barrier inside save_checkpoint, which only rank 0 calls",
        "hang_save_barrier.py",
        "D21",
        (0,),
    ),
    HangScenario(
        "MN3-busy",
        "rank 1 computes a quadratic metric in pure Python while rank 0 waits in all_reduce",
        "hang_busy_rank.py",
        "MN3",
        (1,),
        busy=True,
    ),
    HangScenario(
        "D1-world",
        "one `python` per rank with WORLD_SIZE=3, two started: both wait in init_process_group",
        "hang_world_size.py",
        "D1",
        (2,),
        gone=True,
        launcher="python",
        world=3,
        idle_ticks=6,
    ),
    HangScenario(
        "D21-spawn",
        "D21 under torch.multiprocessing.spawn: no rank has RANK in its environment",
        "hang_spawn.py",
        "D21",
        (0,),
        launcher="script",
    ),
    HangScenario(
        "P1-node",
        "torchrun told of 2 nodes, only node 0 started: its agent waits in the rendezvous, no worker runs",
        "hang_missing_node.py",
        "P1",
        (),
        nnodes=2,
        idle_ticks=6,
    ),
    HangScenario(
        "D21-fork",
        "D21 with ranks forked by multiprocessing.Process: no RANK in any environment",
        "hang_fork.py",
        "D21",
        (0,),
        launcher="script",
    ),
    HangScenario(
        "D19-p2p",
        "a two-stage pipeline whose ranks both receive before they send: every rank waits in recv()",
        "hang_p2p_cycle.py",
        "D19",
        (0, 1),
        collective="recv",
    ),
    HangScenario(
        "D21-thread",
        "rank 0's saver thread waits in a barrier only rank 0 reaches; its main thread idles in join()",
        "hang_thread.py",
        "D21",
        (0,),
        collective="barrier",
    ),
    HangScenario(
        "D21-fsdp",
        "rank 0 evaluates an FSDP2 (fully_shard) model alone: its forward waits in the parameters' all-gather",
        "hang_fsdp_eval.py",
        "D21",
        (0,),
        collective="all_gather",
    ),
    HangScenario(
        "D21-dcp",
        "torch.distributed.checkpoint's save() called on rank 0 only: it waits for rank 1's plan",
        "hang_dcp_save.py",
        "D21",
        (0,),
        collective="gather_object",
    ),
    HangScenario(
        "D21-ddp-forward",
        "rank 0 validates alone through DDP without no_grad(): its forward waits in DDP's buffer broadcast",
        "hang_ddp_eval_forward.py",
        "D21",
        (0,),
        collective="broadcast",
        rank_pid=True,
    ),
    HangScenario(
        "D20-alive",
        "rank 1 raised, but a non-daemon thread keeps its process alive: rank 0 waits in backward() for ever",
        "hang_thread_alive.py",
        "D20",
        (1,),
        ended=True,
    ),
)
# How each launcher starts a job of N local ranks on a loopback port: the command before the script.
LAUNCHERS = ("torch.distributed.run", "torchrun", "accelerate", "deepspeed")


def launch_command(launcher: str, nproc: int, port: int, world: int = 0, nnodes: int = 1) -> list[str]:
    """The launcher's command line for `nproc` ranks on this machine (the script follows it):
    one of LAUNCHERS; "python", one process per rank started by a shell with the rank's variables
    (WORLD_SIZE `world`, or `nproc`); "script", the script starts its ranks itself (mp.spawn).
    torchrun is told of `nnodes` nodes, this one node 0."""
    if launcher == "python":
        return by_hand(nproc, port, world)
    if launcher == "script":
        return [sys.executable]
    if launcher == "torch.distributed.run":
        return [sys.executable, "-m", "torch.distributed.run", *_torchrun_args(nproc, port, nnodes)]
    if launcher == "torchrun":
        return [
            os.path.join(os.path.dirname(sys.executable), "torchrun"),
            *_torchrun_args(nproc, port, nnodes),
        ]
    if launcher == "accelerate":
        return accelerate_launch(nproc, port)
    if launcher == "deepspeed":  # its per-node launcher runs each rank as `python -u script --local_rank=N`
        return [
            sys.executable, "-m", "deepspeed.launcher.runner", f"--num_gpus={nproc}",
            "--master_addr=127.0.0.1", f"--master_port={port}",
        ]  # fmt: skip
    raise ValueError(f"unknown launcher {launcher!r}")


def _torchrun_args(nproc: int, port: int, nnodes: int = 1) -> list[str]:
    nodes = [f"--nnodes={nnodes}", *(["--node-rank=0"] if nnodes > 1 else [])]
    return [*nodes, f"--nproc-per-node={nproc}", "--master-addr=127.0.0.1", f"--master-port={port}"]


@dataclass
class HungJob:
    """A running hung job: its launcher, token and port."""

    launcher_pid: int
    token: str
    port: int


def _rank_cpu(token: str, skip: tuple[int, ...] = ()) -> dict[int, int]:
    """CPU ticks used so far by each rank process of the job, but for the ranks in `skip`: those
    with LOCAL_RANK set, or started by mp.spawn or forked by multiprocessing (a child with its
    parent's command line), whose parent is not a rank too (a debug server or DataLoader worker
    is a rank's child)."""
    used, parents, commands, ranked = {}, {}, {}, set()
    for pid in processes_with_token(token):
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                environ = b"\0" + handle.read()
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                commands[pid] = handle.read()
            with open(f"/proc/{pid}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[-1].split()
            used[pid] = int(fields[11]) + int(fields[12])
            parents[pid] = int(fields[1])
        except (OSError, IndexError, ValueError):
            continue
        if (b"--multiprocessing-fork" in commands[pid] or b"\0LOCAL_RANK=" in environ) and not any(
            f"\0RANK={r}\0".encode() in environ for r in skip
        ):
            ranked.add(pid)
    ranked |= {pid for pid in used if commands[pid] == commands.get(parents[pid]) and not skip}
    # a dead rank's forked child, reparented, keeps its RANK: no rank of the job (this process is
    # kept in the table: it may be an ancestor of the job's launcher)
    procs = {**all_procs(), **{p.pid: p for p in [read_proc(os.getpid())] if p is not None}}
    ranked -= {pid for pid in ranked if pid in procs and leftover_child(procs[pid], procs)}
    used = {pid: ticks for pid, ticks in used.items() if pid in ranked}
    return {pid: ticks for pid, ticks in used.items() if parents[pid] not in used}


def _cpu(pids: list[int]) -> dict[int, int]:
    """CPU ticks used so far by each of `pids` that still runs."""
    used = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[-1].split()
            used[pid] = int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            continue
    return used


def _quiet(before: dict[int, int], now: dict[int, int], slack: int) -> bool:
    return bool(now) and now.keys() == before.keys() and all(now[p] - before[p] <= slack for p in now)


@contextmanager
def hung_job(
    scenario: HangScenario,
    quiet_s: float = 1.5,
    start_timeout_s: float = 120.0,
    env: Mapping[str, str] | None = None,
    recorders: bool = False,
    launcher: str = "torch.distributed.run",
) -> Iterator[HungJob]:
    """Start `scenario`, wait until every rank has used no CPU for `quiet_s` (frozen), yield it.

    `launcher` is one of LAUNCHERS; `env` adds variables to the job's environment; `recorders` runs the script under
    with_recorders.py (Flight Recorder dumps, the debug server: see there), whose threads use a
    little CPU in a frozen job, so a few ticks per rank still count as quiet."""
    with tempfile.TemporaryDirectory(prefix="triage-hang-") as scratch:
        yield from _hung_job(
            scenario, quiet_s, start_timeout_s, {**(env or {}), "TMPDIR": scratch}, recorders, launcher
        )


def _hung_job(
    scenario: HangScenario,
    quiet_s: float,
    start_timeout_s: float,
    env: Mapping[str, str],
    recorders: bool,
    launcher: str,
) -> Iterator[HungJob]:
    """hung_job's body; the job's TMPDIR (lock files, checkpoints) is a folder removed after it."""
    token = uuid.uuid4().hex
    port = free_port()
    job_env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    job_env.update(
        {TOKEN_VAR: token, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "PYTHONWARNINGS": "ignore"}
    )
    job_env.update(scenario.env)
    job_env.update(env)
    script = [str(WITH_RECORDERS), scenario.path] if recorders else [scenario.path]
    if launcher == LAUNCHERS[0] and scenario.launcher != LAUNCHERS[0]:
        launcher = scenario.launcher
    if launcher == "script":
        job_env["HANG_MASTER_PORT"] = str(port)
    command = [*launch_command(launcher, scenario.nproc, port, scenario.world, scenario.nnodes), *script]
    skip = scenario.suspects if scenario.busy else ()
    alive = scenario.running - len(skip)
    # stdin: a pipe nobody writes to, as a terminal nobody types in (a rank that reads it waits).
    proc = subprocess.Popen(
        command,
        env=job_env,
        start_new_session=True,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + start_timeout_s
        before: dict[int, int] = {}
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{scenario.script} exited ({proc.returncode}) before it hung")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{scenario.script}: no hang within {start_timeout_s:g} s")
            time.sleep(quiet_s)
            now = _rank_cpu(token, skip) if scenario.running else _cpu(processes_with_token(token))
            if (len(now) == alive if scenario.gone else len(now) >= alive) and _quiet(
                before, now, max(scenario.idle_ticks, 3 if recorders else 0)
            ):
                break
            before = now
        yield HungJob(proc.pid, token, port)
    finally:
        end_processes(token)
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
