"""Which probe runner a front end gets: the real probes, or none at all.

Kept apart from the app so `triage walk` can use it without importing textual.
"""

from __future__ import annotations

import threading

from triage.core.facts import ProbeOptions, ProbeResult, ProbeRunner


class NoProbes:
    """A runner for when probes are switched off or cannot be imported: every probe is unavailable,
    so every probe node falls back to its question."""

    def __init__(self, why: str) -> None:
        self.why = why

    def run(self, name: str, options: ProbeOptions, cancel: threading.Event) -> ProbeResult:
        return ProbeResult(name, "unavailable", summary=self.why)


class ProcessProbes:
    """The real probes, each run in a child process (see probes.process for why).

    Cancelling closes the child's stdin; the probe then stops its own children and answers within
    `stop_grace_s`, or the child's process group is killed."""

    def __init__(self, stop_grace_s: float = 5.0, command: list[str] | None = None) -> None:
        import sys

        self.stop_grace_s = stop_grace_s
        # The child program; tests give one that speaks the same protocol.
        self.command = command or [sys.executable, "-m", "probes.process"]

    def shutdown(self) -> None:
        """The app is closing: kill every probe process now (and any started from now on)."""
        from triage.core import children

        children.kill_owned(self)

    def run(self, name: str, options: ProbeOptions, cancel: threading.Event) -> ProbeResult:
        import json
        import subprocess
        import tempfile
        import time
        from dataclasses import asdict

        from probes.process import result_from_json
        from triage.core import children

        started = time.monotonic()
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            child = children.popen(
                self.command,
                owner=self,
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=err,  # never the terminal: the app owns the screen
                env=_child_env(),
            )
            try:
                assert child.stdin is not None
                child.stdin.write((json.dumps({"name": name, "options": asdict(options)}) + "\n").encode())
                child.stdin.flush()
                stop_by: float | None = None
                while child.poll() is None:
                    if cancel.wait(0.05) and stop_by is None:
                        child.stdin.close()
                        stop_by = time.monotonic() + self.stop_grace_s
                    if stop_by is not None and time.monotonic() > stop_by:
                        break
            finally:
                children.reap(child)  # also when the app's worker is torn down mid-probe
            if child.stdin is not None and not child.stdin.closed:
                child.stdin.close()
            out.seek(0)
            err.seek(0)
            text, problem = out.read().decode(errors="replace"), err.read().decode(errors="replace")
        elapsed = time.monotonic() - started
        if cancel.is_set():
            return ProbeResult(name, "error", duration_s=elapsed, summary="cancelled")
        try:
            return result_from_json(text.strip().splitlines()[-1])
        except (ValueError, KeyError, IndexError):
            last = problem.strip().splitlines()[-1:] or [f"exit status {child.returncode}"]
            return ProbeResult(
                name, "error", duration_s=elapsed, summary=f"the probe process failed: {last[0]}"
            )


def _child_env() -> dict[str, str]:
    """The child sees this environment (the probes read it) and can import this checkout."""
    import os
    from pathlib import Path

    import triage

    env = dict(os.environ)
    root = str(Path(triage.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


class LocalProbes:
    """The real probes (probes.registry.LocalProbeRunner), imported on the first probe run, in the
    probe's own thread: the app paints its first screen without paying for the import."""

    def __init__(self) -> None:
        self._runner: ProbeRunner | None = None
        self._lock = threading.Lock()

    def run(self, name: str, options: ProbeOptions, cancel: threading.Event) -> ProbeResult:
        with self._lock:
            if self._runner is None:
                try:
                    from probes.registry import LocalProbeRunner
                except ImportError as exc:
                    self._runner = NoProbes(f"probes are not installed ({exc})")
                else:
                    self._runner = LocalProbeRunner()
        return self._runner.run(name, options, cancel)


def default_runner() -> ProbeRunner:
    """The real probes of this machine, in this process (for `triage walk`)."""
    return LocalProbes()


def app_runner() -> ProbeRunner:
    """The real probes for the app: each in a child process, so the UI never waits on one."""
    return ProcessProbes()
