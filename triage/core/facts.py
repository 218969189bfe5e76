"""The probe contract shared by every probe, the `triage probe` command and the TUI.

A probe is read-only, needs no root, is bounded by a timeout, leaves no process behind and sends
no traffic beyond loopback unless the user names a host.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

Status = Literal["ok", "warn", "fail", "unavailable", "error"]
STATUS_ORDER: tuple[Status, ...] = ("ok", "unavailable", "warn", "fail", "error")


@dataclass(frozen=True)
class Evidence:
    """What a person can re-run or read: the call or command, and what it returned (redacted)."""

    source: str
    output: str


@dataclass(frozen=True)
class ProbeResult:
    """What one probe found: its status, the facts it established, and the evidence for them."""

    name: str
    status: Status
    facts: dict[str, object] = field(default_factory=dict)
    evidence: tuple[Evidence, ...] = ()
    duration_s: float = 0.0
    summary: str = ""  # one line: what the probe found, or why it could not run
    # The facts whose values made the probe warn or fail (a port taken, a partial rank contract).
    # Findings point at entries only through these, so a healthy fact that merely fits an entry's
    # story (dist.minitest=ok, env.launcher=none) does not raise an alarm on its own.
    flagged: tuple[str, ...] = ()

    def to_plain(self) -> dict[str, Any]:
        """The result as JSON-ready data (the one codec: `triage probe --json`, the app's probe process)."""
        return {
            "name": self.name,
            "status": self.status,
            "summary": self.summary,
            "duration_s": self.duration_s,
            "facts": self.facts,
            "flagged": list(self.flagged),
            "evidence": [{"source": e.source, "output": e.output} for e in self.evidence],
        }

    @classmethod
    def from_plain(cls, data: Mapping[str, Any]) -> ProbeResult:
        """The inverse of `to_plain`."""
        return cls(
            name=str(data["name"]),
            status=data["status"],
            facts=dict(data.get("facts", {})),
            evidence=tuple(Evidence(str(e["source"]), str(e["output"])) for e in data.get("evidence", ())),
            duration_s=float(data.get("duration_s", 0.0)),
            summary=str(data.get("summary", "")),
            flagged=tuple(str(f) for f in data.get("flagged", ())),
        )


@dataclass(frozen=True)
class ProbeOptions:
    """What the user told triage: a timeout, paths to configs, a host they allow probing, a script."""

    timeout_s: float = 10.0
    accelerate_config: str | None = None
    deepspeed_config: str | None = None
    peer_host: str | None = None
    script: str | None = None  # a training script for the lint probe to read

    def missing_inputs(self) -> tuple[str, ...]:
        """Probes that cannot run at all with these options: the lint probe needs a script."""
        return () if self.script else ("lint",)


MAX_TIMEOUT_S = 3600.0


def check_timeout(flag: str, value: float) -> float:
    """A probe timeout from the command line: a finite number of seconds above 0, at most an hour
    (nan and inf parse as floats, and would mean "never stop")."""
    from triage.core.errors import UserError

    if not 0 < value <= MAX_TIMEOUT_S:  # false for nan and inf too
        raise UserError(f"{flag} must be above 0 and at most {MAX_TIMEOUT_S:g} seconds, not {value:g}")
    return value


class ProbeRunner(Protocol):
    """Runs one probe by name. The TUI and the CLI receive one of these (tests inject their own)."""

    def run(self, name: str, options: ProbeOptions, cancel: threading.Event) -> ProbeResult: ...


ProgressCallback = Callable[[str, ProbeResult | None], None]
