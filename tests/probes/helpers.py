"""Helpers for the probe tests: finding leftover processes through /proc, running the real CLI."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MARKER_ENV = "TRIAGE_TEST_MARKER"


def marked_pids(marker: str) -> list[int]:
    """PIDs of live processes whose environment carries MARKER_ENV=marker (psutil-free /proc scan)."""
    needle = f"{MARKER_ENV}={marker}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue  # exited while we looked
        if state != "Z":  # a zombie is dead; its parent just has not reaped it yet
            found.append(int(entry.name))
    return found


def wait_gone(marker: str, within_s: float = 2.0) -> list[int]:
    """Leftover marked processes after giving them `within_s` to disappear (empty when clean)."""
    deadline = time.monotonic() + within_s
    while True:
        left = marked_pids(marker)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.05)


def triage_env(**extra: str) -> dict[str, str]:
    """The test process's environment for a `python -m triage` child, minus launcher variables."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TORCHELASTIC_", "NCCL_", "SLURM_", "OMPI_", "ACCELERATE_"))
        and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    }
    env["PYTHONPATH"] = str(REPO)
    env.pop("TRIAGE_KNOWLEDGE", None)
    env.update(extra)
    return env


def run_triage(
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 60,
    prefix: list[str] | None = None,
    stdin: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """`python -m triage ARGS` as a user runs it (optionally behind `ip netns exec NS`)."""
    return subprocess.run(
        [*(prefix or []), sys.executable, "-m", "triage", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env if env is not None else triage_env(),
        cwd=REPO,
        timeout=timeout,
        check=False,
    )
