"""Running a command from a probe: bounded by a timeout, stoppable by a cancel event, leaving nothing.

Every child starts in a session of its own, so on timeout or cancel the whole session (the child and
anything it started) is killed, and the call only returns once the child has been reaped.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from triage.core import children
from triage.core.children import kill_session
from triage.core.facts import Evidence
from triage.core.redact import redact_text

POLL_S = 0.05
MAX_EVIDENCE_CHARS = 4000


@dataclass(frozen=True)
class CommandResult:
    """What a command did. `returncode` is None when it could not start or was killed."""

    argv: tuple[str, ...]
    returncode: int | None
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    cancelled: bool = False
    error: str = ""  # why it could not start (not installed, not executable)
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def command(self) -> str:
        return " ".join(self.argv)

    def describe(self) -> str:
        """The outcome in a few words, for evidence and summaries."""
        if self.error:
            return self.error
        if self.timed_out:
            return f"timed out after {self.duration_s:.1f}s (killed)"
        if self.cancelled:
            return "cancelled (killed)"
        return f"exit {self.returncode}"


def run_command(
    argv: Sequence[str],
    *,
    timeout_s: float,
    cancel: threading.Event | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
) -> CommandResult:
    """Run `argv`, capturing its output, for at most `timeout_s` seconds or until `cancel` is set."""
    args = tuple(argv)
    start = time.monotonic()
    try:
        proc = children.popen(
            args,
            owner=cancel,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=cwd,
        )
    except OSError as exc:
        reason = "not installed" if isinstance(exc, FileNotFoundError) else exc.strerror or str(exc)
        return CommandResult(args, None, error=f"{args[0]}: {reason}")
    deadline = start + timeout_s
    timed_out = cancelled = False
    try:
        while True:
            try:
                out, err = proc.communicate(timeout=max(0.0, min(POLL_S, deadline - time.monotonic())))
                break
            except subprocess.TimeoutExpired:
                if cancel is not None and cancel.is_set():
                    cancelled = True
                elif time.monotonic() >= deadline:
                    timed_out = True
                else:
                    continue
                kill_session(proc.pid)
                out, err = proc.communicate()
                break
    finally:
        # Also on an exception (KeyboardInterrupt) escaping the loop; ends anything it started.
        children.reap(proc)
    return CommandResult(
        args,
        None if (timed_out or cancelled) else proc.returncode,
        out.decode("utf-8", "replace"),
        err.decode("utf-8", "replace"),
        timed_out,
        cancelled,
        duration_s=time.monotonic() - start,
    )


def evidence(source: str, output: str) -> Evidence:
    """Evidence with secrets redacted and then the output cut to a readable length (in that
    order: a secret cut in half is no longer recognisable)."""
    text = redact_text(output.rstrip()[: MAX_EVIDENCE_CHARS * 4])
    if len(text) > MAX_EVIDENCE_CHARS:
        more = len(output.rstrip()) - MAX_EVIDENCE_CHARS
        text = text[:MAX_EVIDENCE_CHARS] + f"\n... ({more} more characters)"
    return Evidence(redact_text(source), text)


def command_evidence(result: CommandResult) -> Evidence:
    """Evidence for a command: its line, its status, and what it printed."""
    parts = [f"[{result.describe()}]"]
    if result.stdout.strip():
        parts.append(result.stdout.rstrip())
    if result.stderr.strip():
        parts.append("stderr: " + result.stderr.rstrip())
    return evidence(result.command, "\n".join(parts))
