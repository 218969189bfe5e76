"""Running a reproduction: bounded in time, output captured, every process it started ended.

torchrun starts its workers in sessions of their own, so ending the launcher's process group does
not reach them, and once the launcher dies they are re-parented away from us. Every process of a
run therefore carries a random token in its environment (inherited by every descendant), and
clean-up finds them by reading /proc/<pid>/environ, then ends them by PID: SIGTERM, a grace
period, SIGKILL.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from triage.core import children
from triage.repro import Scenario
from triage.repro.settings import DEFAULT, Setting

TOKEN_VAR = "TRIAGE_REPRO_TOKEN"
GRACE_S = 3.0
WORLD = 2  # processes in every job a reproduction starts
# One `python` per rank started by a shell loop (the interpreter is $0 and the script $1).
_BY_HAND = (
    "for r in $(seq 0 {last}); do RANK=$r LOCAL_RANK=$r WORLD_SIZE={world} MASTER_ADDR=127.0.0.1 "
    'MASTER_PORT={port} "$0" "$@" & done; wait'
)
# Variables that would make a bare `python` run look launched, or change torch's behaviour.
_SCRUB = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    "TORCH_DISTRIBUTED_DEBUG",
    "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE",
    "LOGLEVEL",
    "TORCH_CPP_LOG_LEVEL",
    "NCCL_DEBUG",
)


@dataclass
class RunResult:
    """What a reproduction printed and how it ended."""

    scenario: Scenario
    output: str
    returncode: int | None
    duration_s: float
    timed_out: bool
    leftover: list[int] = field(default_factory=list)  # PIDs still alive after clean-up (should be [])
    token: str = ""
    setting: Setting = DEFAULT
    # --log-dir runs: each per-rank file, by its path under the log directory (`attempt_0/1/stderr.log`)
    files: dict[str, str] = field(default_factory=dict)

    def sources(self) -> list[tuple[str, str]]:
        """(name, text) of everything the run printed: the console, then any per-rank files."""
        return [("console.log", self.output), *sorted(self.files.items())]


def processes_with_token(token: str) -> list[int]:
    """PIDs of live processes whose environment carries `token` (Linux /proc)."""
    needle = f"{TOKEN_VAR}={token}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                environ = handle.read()
            with open(f"/proc/{entry}/stat", "rb") as handle:
                state = handle.read().rsplit(b")", 1)[-1].split()[0]
        except OSError:
            continue
        if needle in environ.split(b"\0") and state != b"Z":
            found.append(int(entry))
    return found


def end_processes(token: str) -> list[int]:
    """SIGTERM, then SIGKILL, every process carrying `token`; returns those still alive."""
    for sig, wait in ((signal.SIGTERM, GRACE_S), (signal.SIGKILL, 2.0)):
        pids = processes_with_token(token)
        if not pids:
            return []
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and processes_with_token(token):
            time.sleep(0.1)
    return processes_with_token(token)


def free_port() -> int:
    """A TCP port on loopback that is free right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_for_port(port: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return True
        time.sleep(0.2)
    return False


def _torchrun(scenario: Scenario, extra: list[str], setting: Setting, log_dir: Path | None) -> list[str]:
    logs = ["--redirects", "3", "--log-dir", str(log_dir)] if log_dir is not None else []
    # the deprecated launcher takes torchrun's options and also passes --local-rank to the script
    module = "torch.distributed.launch" if scenario.launch == "launch" else "torch.distributed.run"
    return [
        sys.executable,
        "-m",
        module,
        *extra,
        *setting.torchrun_args,
        *logs,
        *scenario.torchrun_args,
        str(scenario.path),
    ]


def _stamp(line: str) -> str:
    """A collector's arrival time in front of a line, as `kubectl logs --timestamps` writes it."""
    now = datetime.datetime.now(datetime.UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z " + line


def _rank_files(log_dir: Path) -> dict[str, str]:
    """The per-rank files torchrun wrote under `log_dir`, by their path below the run's folder."""
    found = {}
    for path in sorted(log_dir.rglob("*.log")):
        parts = path.relative_to(log_dir).parts
        name = "/".join(parts[1:]) if len(parts) > 1 else parts[0]  # drop torchrun's run-id folder
        text = path.read_text(encoding="utf-8", errors="replace")
        if text:
            found[name] = text
    return found


def _start(
    scenario: Scenario,
    setting: Setting,
    env: dict[str, str],
    workdir: str,
    log_dir: Path | None,
    deadline: float,
    launched: list[subprocess.Popen[str]],
) -> subprocess.Popen[str]:
    """Start the scenario's processes (each added to `launched` at once, for clean-up); returns the
    one whose output is the run's console and whose end is the run's end."""
    if scenario.launch == "shell":
        command = [*by_hand(WORLD, free_port()), str(scenario.path)]
    elif scenario.launch == "accelerate":
        command = [*accelerate_launch(WORLD, free_port()), str(scenario.path)]
    elif scenario.launch == "python":
        command = [sys.executable, str(scenario.path)]
    elif scenario.launch == "two-jobs":
        port = free_port()
        common = ["--nnodes=1", "--nproc-per-node=1", "--master-addr=127.0.0.1", f"--master-port={port}"]
        first = _torchrun(scenario, common, DEFAULT, None)
        launched.append(
            children.popen(
                first, env=env, cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True
            )
        )
        _wait_for_port(port, max(1.0, deadline - time.monotonic() - 10))
        command = _torchrun(scenario, common, setting, log_dir)
    else:
        command = _torchrun(scenario, ["--standalone", f"--nproc-per-node={WORLD}"], setting, log_dir)
    proc = children.popen(
        command,
        env=env,
        cwd=workdir,
        stdin=subprocess.DEVNULL,  # a worker's debugger or input() reads end-of-file, as under a scheduler
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
    )
    launched.append(proc)
    return proc


def by_hand(nproc: int, port: int, world: int = 0) -> list[str]:
    """A launch script written by hand: one `python` per rank with the rank's variables exported, in
    the background, then `wait`; the script follows (WORLD_SIZE `world`, or `nproc`)."""
    loop = _BY_HAND.format(last=nproc - 1, world=world or nproc, port=port)
    return ["sh", "-c", loop, sys.executable]


def accelerate_launch(nproc: int, port: int) -> list[str]:
    """`accelerate launch` of `nproc` processes on this machine with no config file (it runs on the
    CPU here); the script follows."""
    return [
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", f"--num_processes={nproc}",
        "--num_machines=1", "--mixed_precision=no", "--dynamo_backend=no",
        "--main_process_ip=127.0.0.1", f"--main_process_port={port}",
    ]  # fmt: skip


def run(
    scenario: Scenario, echo: Callable[[str], None] | None = None, setting: Setting = DEFAULT
) -> RunResult:
    """Run one scenario in one setting to completion or to its bound; capture what it printed."""
    token = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    env.update(scenario.env)
    env.update(setting.env)  # a scenario skips the settings that would undo what it needs
    env.update({TOKEN_VAR: token, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"})
    started = time.monotonic()
    deadline = started + scenario.bound_s
    lines: list[str] = []
    files: dict[str, str] = {}
    launched: list[subprocess.Popen[str]] = []
    timed_out = False
    leftover: list[int] = []
    with tempfile.TemporaryDirectory(prefix="triage-repro-") as workdir:
        env["TRIAGE_REPRO_CHECKPOINT"] = str(Path(workdir) / "checkpoint.pt")
        log_dir = Path(workdir) / "logs" if setting.log_dir and scenario.torchrun else None
        reader: threading.Thread | None = None
        proc: subprocess.Popen[str] | None = None
        try:
            proc = _start(scenario, setting, env, workdir, log_dir, deadline, launched)

            def pump() -> None:
                assert proc is not None and proc.stdout is not None
                for line in proc.stdout:
                    if setting.timestamps:
                        line = _stamp(line)
                    lines.append(line)
                    if echo is not None:
                        echo(line)

            reader = threading.Thread(target=pump, daemon=True)
            reader.start()
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                timed_out = True
        finally:
            # Also on Ctrl-C or SIGTERM: torchrun's workers live in sessions of their own.
            leftover = end_processes(token)
            for child in launched:
                children.reap(child)
            if reader is not None:
                reader.join(timeout=5)
        if log_dir is not None and log_dir.is_dir():
            files = _rank_files(log_dir)
    return RunResult(
        scenario,
        "".join(lines),
        proc.returncode if proc is not None else None,
        time.monotonic() - started,
        timed_out,
        leftover,
        token,
        setting,
        files,
    )
