"""The local mini-test: spawn the ranks on this machine, host their store, watch, and clean up.

The launching process hosts the c10d store itself (not rank 0), so the monitor keeps working
whichever rank hangs, raises or dies. The listening socket is opened before the ranks start and
handed to the store afterwards (TCPStore's master_listen_fd), so the ranks and the parent's
`import torch` overlap with no window in which another process could take the port. Every rank runs
in a session of its own, started through triage.core.children (it dies with this process); at
the end every session is killed and every child reaped.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import IO, Any

from probes.dist.protocol import FAULT_ENV
from probes.dist.report import Outcome
from probes.dist.worker import CHILD_ENV, KEY_PREFIX, RUN_ENV
from triage.core import children

PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the directory holding `probes/`
EXIT_GRACE_S = 3.0
# Ranks start together, so once one has reached the store the others should follow within
# seconds; a rank silent this long after the last one arrived is stuck, not slow.
STARTUP_STALL_S = 10.0
# Launcher variables that must not leak into the ranks from the shell triage runs in.
_SCRUB = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")


class Unavailable(Exception):
    """The mini-test cannot run here (no torch, no torch.distributed); the message says why."""


def _rank_env(base: Mapping[str, str], rank: int, world: int, port: int, run_id: str, backend: str) -> dict[str, str]:
    env = {k: v for k, v in base.items() if k not in _SCRUB and not k.startswith("TORCHELASTIC_")}
    env.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_WORLD_SIZE=str(world),
        GROUP_RANK="0",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        OMP_NUM_THREADS=env.get("OMP_NUM_THREADS", "1"),
        PYTHONPATH=os.pathsep.join(p for p in (str(PACKAGE_ROOT), env.get("PYTHONPATH", "")) if p),
        PYTHONUNBUFFERED="1",
        **{CHILD_ENV: "1", RUN_ENV: run_id},
    )
    if backend == "gloo":
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")  # every rank is on this machine
    return env


def _tail(handle: IO[bytes], limit: int = 2000) -> str:
    handle.flush()
    handle.seek(0, os.SEEK_END)
    size = handle.tell()
    handle.seek(max(0, size - limit))
    lines = handle.read().decode("utf-8", "replace").splitlines()
    return "\n".join(line for line in lines if "Failed to initialize NumPy" not in line and "_conversion_method" not in line)


def run_minitest(
    nproc: int | None = None,
    *,
    backend: str = "auto",
    stall_timeout_s: float = 5.0,
    deadline_s: float = 60.0,
    fault: str | None = None,
    extra_env: Mapping[str, str] | None = None,
    cancel: threading.Event | None = None,
) -> Outcome:
    """Run the mini-test on this machine and return the verdict (every child is gone on return).

    nproc defaults to one rank per visible GPU with NCCL, else 2 CPU ranks on gloo. `fault` is a
    TRIAGE_DIST_FAULT spec (see probes.dist.protocol). Raises Unavailable when torch cannot run it.
    """
    cancel = cancel or threading.Event()
    from probes.versions import torch_location

    if torch_location() is None:
        raise Unavailable(f"torch is not installed for {sys.executable}")
    started = time.monotonic()
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(256)
    port = listener.getsockname()[1]
    run_id = uuid.uuid4().hex[:12]
    procs: dict[int, subprocess.Popen[bytes]] = {}
    logs: dict[int, IO[bytes]] = {}
    store: Any = None
    try:
        gpus = visible_gpus() if backend in ("auto", "nccl") else 0
        if backend == "auto":
            backend = "nccl" if gpus > 0 else "gloo"
        world = nproc if nproc is not None else (gpus if backend == "nccl" and gpus > 0 else 2)
        base_env = dict(os.environ)
        base_env.update(extra_env or {})
        if fault is not None:
            base_env[FAULT_ENV] = fault
        for rank in range(world):
            if cancel.is_set():
                break
            logs[rank] = tempfile.TemporaryFile(prefix=f"triage-dist-{rank}-")
            env = _rank_env(base_env, rank, world, port, run_id, backend)
            argv = [sys.executable, "-m", "probes.dist", "--backend", backend]
            argv += ["--timeout", f"{stall_timeout_s:g}", "--startup-timeout", f"{deadline_s:g}"]
            procs[rank] = children.popen(
                argv, owner=cancel, stdin=subprocess.DEVNULL, stdout=logs[rank], stderr=subprocess.STDOUT, env=env
            )
        children.quiet_torch_import()
        try:
            import torch.distributed
        except ImportError as exc:
            raise Unavailable(f"torch.distributed cannot be imported: {exc}") from exc
        dist: Any = torch.distributed  # torch's stubs do not export the store classes
        if not dist.is_available():
            raise Unavailable("this torch build has no torch.distributed")
        fd = listener.detach()  # the store owns the listening socket from here on
        try:
            store = dist.TCPStore(
                "127.0.0.1",
                port,
                None,
                True,
                timedelta(seconds=max(deadline_s, 5.0)),
                wait_for_workers=False,
                master_listen_fd=fd,
            )
        except Exception:
            os.close(fd)
            raise
        from probes.dist.monitor import Monitor

        def exits() -> dict[int, int | None]:
            return {rank: proc.poll() for rank, proc in procs.items()}

        remaining = max(0.5, deadline_s - (time.monotonic() - started))
        outcome = Monitor(
            dist.PrefixStore(f"{KEY_PREFIX}/{run_id}/", store),
            world,
            stall_timeout_s=stall_timeout_s,
            startup_timeout_s=min(remaining, max(stall_timeout_s, STARTUP_STALL_S)),
            deadline_s=remaining,
            exits=exits,
            cancel=cancel,
            backend=backend,
        ).run()
        outcome.elapsed_s = round(time.monotonic() - started, 3)
        if outcome.result == "ok":
            _await_exits(procs, EXIT_GRACE_S)
        for view in outcome.ranks:
            if (view.failed or view.rank in outcome.missing) and view.rank in logs:
                view.output_tail = _tail(logs[view.rank])
        return outcome
    finally:
        for proc in procs.values():  # a rank's own children (none today) share its session
            children.kill_session(proc.pid)
        for proc in procs.values():
            children.reap(proc)
        for handle in logs.values():
            handle.close()
        if listener.fileno() != -1:
            listener.close()
        del store


def _await_exits(procs: Mapping[int, subprocess.Popen[bytes]], grace_s: float) -> None:
    deadline = time.monotonic() + grace_s
    for proc in procs.values():
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            return


def visible_gpus() -> int:
    """GPUs a CUDA build of torch would see here, found without importing torch (NVML and
    CUDA_VISIBLE_DEVICES), so the ranks can start while the parent is still importing it."""
    from probes.gpu import gpu_count
    from probes.versions import static_torch_version, torch_location

    location = torch_location()
    if location is None or not static_torch_version(location).get("cuda"):
        return 0
    count = gpu_count()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        count = min(count, len([d for d in visible.split(",") if d.strip()]))
    return count
