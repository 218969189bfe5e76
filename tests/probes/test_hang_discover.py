"""Which launcher a process is, from its command line as /proc shows it: every launcher's shapes;
a rank given on the command line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from probes.hang.discover import Proc, all_procs, find_ranks, launcher_name, leftover_children, read_proc

PROCTABLES = Path(__file__).resolve().parents[1] / "fixtures" / "hang" / "proctables"


@pytest.mark.parametrize(
    ("argv", "name"),
    [
        (("/venv/bin/python", "/venv/bin/torchrun", "--nproc-per-node=8", "train.py"), "torchrun"),
        (("torchrun", "--nnodes=2", "train.py"), "torchrun"),
        (("python", "-m", "torch.distributed.run", "--nproc-per-node=2", "train.py"), "torchrun"),
        (("python3", "-m", "torch.distributed.launch", "--use-env", "train.py"), "torchrun"),
        (
            ("/venv/bin/python", "/venv/bin/accelerate", "launch", "--multi_gpu", "train.py"),
            "accelerate launch",
        ),
        (
            ("python", "-m", "accelerate.commands.launch", "--num_processes=2", "train.py"),
            "accelerate launch",
        ),
        (("/venv/bin/python", "/venv/bin/deepspeed", "--num_gpus=8", "train.py"), "deepspeed"),
        (("python", "-u", "-m", "deepspeed.launcher.launch", "--world_info=e30=", "train.py"), "deepspeed"),
        (("srun", "-N", "2", "python", "train.py"), "srun"),
        (("mpirun", "-np", "8", "python", "train.py"), "mpirun"),
    ],
)
def test_each_launcher_is_recognised_from_its_command_line(argv: tuple[str, ...], name: str) -> None:
    assert launcher_name(argv) == name


@pytest.mark.parametrize(
    "argv",
    [
        ("python", "train.py", "--launcher", "torchrun"),
        ("python", "-u", "train.py"),
        ("/venv/bin/python", "/venv/bin/accelerate", "config"),
        (),
    ],
)
def test_a_rank_or_another_command_is_not_a_launcher(argv: tuple[str, ...]) -> None:
    assert launcher_name(argv) is None


@pytest.mark.parametrize(
    ("argv", "rank", "world"),
    [
        (("python", "train.py", "--rank", "1", "--world-size", "2"), 1, 2),
        (("python", "main.py", "--rank=0", "--world_size=4"), 0, 4),
        (("python", "train.py", "--rank", "--world-size", "x"), None, None),
        (("python", "train.py", "--ranks", "1"), None, None),
    ],
)
def test_a_rank_given_on_the_command_line_is_read_from_it(
    argv: tuple[str, ...], rank: int | None, world: int | None
) -> None:
    proc = Proc(1, 0, argv, {})
    assert (proc.rank, proc.world_size, proc.rank_in_env) == (rank, world, False)
    assert Proc(1, 0, argv, {"RANK": "3"}).rank == 3  # the environment first


def test_a_process_with_rank_on_its_command_line_is_a_rank_only_when_it_runs_torch() -> None:
    """Ranks started by hand as `python train.py --rank N`: found by their command line where no
    variable says their rank, but a `--rank` of a program that does not run torch is not one."""
    code = "import sys, time\nif sys.argv[1:2] == ['torch']: import torch\nprint('up', flush=True)\ntime.sleep(60)"
    started = [
        subprocess.Popen(
            [sys.executable, "-c", code, what, "--rank", "1", "--world-size", "2"],
            stdout=subprocess.PIPE,
            text=True,
            env={k: v for k, v in os.environ.items() if "RANK" not in k},
        )
        for what in ("torch", "plain")
    ]
    try:
        for proc in started:
            assert proc.stdout is not None and proc.stdout.readline() == "up\n"
        ranks = find_ranks()
        mine = [(p.pid, p.rank, p.world_size) for p in ranks if p.pid in {s.pid for s in started}]
        assert mine == [(started[0].pid, 1, 2)]
    finally:
        for proc in started:
            proc.kill()
            proc.wait()


def _proc(pid: int, ppid: int, argv: tuple[str, ...], **env: str) -> Proc:
    return Proc(pid, ppid, argv, dict(env))


def test_a_rank_s_pid_stands_for_every_rank_of_its_job() -> None:
    """The PID a user picks from `top` is often a rank's: its job is every rank that meets at the
    same master (torchrun's workers, or a shell loop's `python` per rank), not another job's."""
    job = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "none"}
    procs = {
        p.pid: p
        for p in (
            _proc(10, 1, ("/venv/bin/python", "/venv/bin/torchrun", "--nproc-per-node=2", "train.py")),
            _proc(11, 10, ("/venv/bin/python", "-u", "train.py"), RANK="0", LOCAL_RANK="0", **job),
            _proc(12, 10, ("/venv/bin/python", "-u", "train.py"), RANK="1", LOCAL_RANK="1", **job),
            _proc(21, 1, ("python", "other.py"), RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT="29600"),
            _proc(30, 1, ("sh", "-c", "for r in 0 1; do RANK=$r python solo.py & done; wait")),
            _proc(31, 30, ("python", "solo.py"), RANK="0", WORLD_SIZE="2", MASTER_PORT="29700"),
            _proc(32, 30, ("python", "solo.py"), RANK="1", WORLD_SIZE="2", MASTER_PORT="29700"),
            _proc(41, 1, ("python", "own_init.py"), RANK="0"),
            _proc(42, 1, ("python", "own_init.py"), RANK="1"),
        )
    }
    assert [p.pid for p in find_ranks([12], procs)] == [11, 12]
    assert [p.pid for p in find_ranks([10], procs)] == [11, 12]  # the launcher, as before
    assert [p.pid for p in find_ranks([32], procs)] == [31, 32]
    # no master in the environment (the script's own init_method): nothing ties it to others
    assert [p.pid for p in find_ranks([42], procs)] == [42]


def test_a_tool_a_rank_starts_through_a_shell_is_not_a_rank() -> None:
    """`sh -c "python server.py | grep READY"` from rank 0 passes RANK=0 on to the server: a
    Python process whose nearest Python ancestor below the launcher has its rank is that rank's
    child, even with a shell between them (the bench read "ranks 0, 0" before)."""
    job = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "none"}
    procs = {
        p.pid: p
        for p in (
            _proc(10, 1, ("/venv/bin/python", "/venv/bin/torchrun", "--nproc-per-node=2", "train.py")),
            _proc(11, 10, ("/venv/bin/python", "-u", "train.py"), RANK="0", LOCAL_RANK="0", **job),
            _proc(12, 10, ("/venv/bin/python", "-u", "train.py"), RANK="1", LOCAL_RANK="1", **job),
            _proc(
                13, 11, ("/bin/sh", "-c", "python -u -c '...' | grep READY"), RANK="0", LOCAL_RANK="0", **job
            ),
            _proc(14, 13, ("/venv/bin/python", "-u", "-c", "..."), RANK="0", LOCAL_RANK="0", **job),
            _proc(15, 13, ("grep", "READY"), RANK="0", LOCAL_RANK="0", **job),
        )
    }
    assert [p.pid for p in find_ranks([10], procs)] == [11, 12]
    assert [p.pid for p in find_ranks([12], procs)] == [11, 12]


def _table(name: str) -> dict[int, Proc]:
    """A process table recorded from /proc while a job hung (tests/fixtures/hang/proctables)."""
    data = json.loads((PROCTABLES / f"{name}.json").read_text(encoding="utf-8"))
    rows = (Proc(r["pid"], r["ppid"], tuple(r["argv"]), r["env"], r["readable"]) for r in data["procs"])
    return {p.pid: p for p in rows}


def test_a_dead_rank_s_orphaned_child_is_not_taken_for_the_rank() -> None:
    """Recorded: a shell loop's rank 0 died of SIGSEGV; the reporter it forked (RANK=0 inherited)
    was reparented to PID 1 and still runs. The job is rank 1 alone (rank 0 is gone), from the
    shell's PID, from rank 1's and from the child's own; the child is reported as left over."""
    procs = _table("shell_loop_rank_died_child_orphaned")
    for pid in (2737, 2739, 2798):
        assert [p.pid for p in find_ranks([pid], procs)] == [2739]
    assert [p.pid for p in find_ranks(None, procs)] == [2739]
    assert [p.pid for p in leftover_children([procs[2739]], procs)] == [2798]


def test_ranks_that_all_lost_their_launcher_are_still_ranks() -> None:
    """torchrun's agent killed: every rank is reparented to PID 1 together, so none is a leftover
    child; a child a rank double-forked away (RANK=1 again, under PID 1) while torchrun's ranks
    still run under it is one."""
    job = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "none"}
    argv = ("/venv/bin/python", "-u", "train.py")
    orphans = {
        p.pid: p
        for p in (_proc(1, 0, ("/sbin/init",)), *(_proc(11 + r, 1, argv, RANK=str(r), **job) for r in (0, 1)))
    }
    assert [p.pid for p in find_ranks(None, orphans)] == [11, 12]
    assert leftover_children(list(orphans.values()), orphans) == []
    live = {
        p.pid: p
        for p in (
            _proc(1, 0, ("/sbin/init",)),
            _proc(5, 1, ("bash",)),
            _proc(10, 5, ("/venv/bin/python", "/venv/bin/torchrun", "--nproc-per-node=2", "train.py")),
            *(_proc(11 + r, 10, argv, RANK=str(r), LOCAL_RANK=str(r), **job) for r in (0, 1)),
            _proc(20, 1, argv, RANK="1", LOCAL_RANK="1", **job),
        )
    }
    assert [p.pid for p in find_ranks(None, live)] == [11, 12]
    assert [p.pid for p in find_ranks([20], live)] == [11, 12]


def test_a_real_rank_s_child_left_behind_is_not_a_rank() -> None:
    """Real processes (no torch): a shell loop's rank 0 forks a child and exits, so the child is
    reparented with RANK=0 while rank 1 still runs under the shell. This test process is in the
    table: it is the shell's parent, and the child's new parent lies above it."""
    port = str(40000 + os.getpid() % 20000)
    rank0 = "import os, time\nif os.fork() == 0: time.sleep(60)\nos._exit(0)"
    loop = f'RANK=0 MASTER_PORT={port} "$0" -c "$1" & RANK=1 MASTER_PORT={port} "$0" -c "import time; time.sleep(60)" & wait'
    shell = subprocess.Popen(["sh", "-c", loop, sys.executable, rank0], start_new_session=True)
    try:
        for _ in range(100):
            procs = {p.pid: p for p in (*all_procs().values(), read_proc(os.getpid())) if p is not None}
            job = [p for p in procs.values() if p.env.get("MASTER_PORT") == port and p.is_python]
            if len(job) == 2 and all(p.ppid != shell.pid for p in job if p.rank == 0):
                break
            time.sleep(0.05)
        child = next(p.pid for p in job if p.rank == 0)
        rank1 = next(p.pid for p in job if p.rank == 1)
        assert [p.pid for p in find_ranks(None, procs) if p.env.get("MASTER_PORT") == port] == [rank1]
        assert [p.pid for p in leftover_children([procs[rank1]], procs)] == [child]
    finally:
        os.killpg(shell.pid, signal.SIGKILL)
        shell.wait()
