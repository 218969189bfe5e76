"""The lint probe: `triage lint` on the training script the user named (`--script train.py`).

It reads one file (read-only, bounded in size) and turns the findings into facts the decision graph
branches on: `lint.rank_conditional_collective` is true when a collective sits under `if rank == 0:`,
and so on for every rule that names a fact. Without a script the probe is unavailable and the walk
asks its questions instead.
"""

from __future__ import annotations

import stat
import threading
from collections import Counter
from pathlib import Path

from triage.core.facts import Evidence, ProbeOptions, ProbeResult, Status
from triage.core.lint import (
    RULES,
    LaunchFacts,
    SourceError,
    decode_source,
    describe,
    find_launches,
    lint_source,
)

NAME = "lint"
KEY_FACTS = (
    "lint.findings",
    "lint.rank_conditional_collective",
    "lint.wrong_device",
    "lint.every_rank_writes",
)
MAX_BYTES = 5_000_000


def script_path(raw: str, flag: str = "--script") -> str:
    """The absolute path of a script the user named, checked now so a typo is a one-line error."""
    from triage.core.errors import UserError

    path = Path(raw).expanduser()
    if not path.exists():
        raise UserError(f"{flag}: no such file: {raw}")
    if not path.is_file():
        raise UserError(f"{flag}: not a file: {raw}")
    return str(path.resolve())


def _read(path: Path) -> str:
    """The script's text; SourceError with one line when it cannot be linted."""
    try:
        info = path.stat()
    except OSError as exc:
        raise SourceError(str(path), f"cannot read: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        raise SourceError(str(path), "not a regular file")
    if info.st_size > MAX_BYTES:
        raise SourceError(str(path), f"{info.st_size:,} bytes, too large to be a training script")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SourceError(str(path), f"cannot read: {exc.strerror or exc}") from None
    return decode_source(data, str(path))


def _target(path: Path) -> tuple[Path, str, LaunchFacts | None]:
    """The Python script to lint: the file itself, or the one a shell launch script starts."""
    text = _read(path)
    if path.suffix != ".sh":
        return path, text, None
    for launch in find_launches(text):
        script = path.parent / launch.script
        if not launch.script.startswith("-m ") and script.is_file():
            return script, _read(script), LaunchFacts(launch.max_restarts, f"{path.name}:{launch.line}")
    raise SourceError(str(path), "no torchrun command that starts a Python script found in it")


def probe(options: ProbeOptions, cancel: threading.Event) -> ProbeResult:
    """Lint the training script the options name, as a probe result."""
    if not options.script:
        return ProbeResult(NAME, "unavailable", summary="no training script given (--script PATH)")
    try:
        path, text, launch = _target(Path(options.script).expanduser())
        findings = lint_source(text, str(path), launch=launch)
        about = describe(text, str(path))
    except SourceError as exc:
        return ProbeResult(NAME, "unavailable", summary=f"cannot lint the script: {exc}")
    facts: dict[str, object] = {rule.fact: False for rule in RULES.values() if rule.fact}
    facts["lint.distributed"] = about.distributed
    facts["lint.loads_checkpoint"] = about.loads_checkpoint
    facts["lint.findings"] = len(findings)
    flagged: list[str] = []
    status: Status = "ok"
    for finding in findings:
        fact = RULES[finding.code].fact
        if finding.severity == "error":
            status = "fail"
        elif finding.severity == "warning" and status == "ok":
            status = "warn"
        if fact is None:
            continue
        facts[fact] = True
        if finding.severity != "info" and fact not in flagged:
            flagged.append(fact)
    counts = Counter(f.code for f in findings)
    listed = ", ".join(
        f"{code} [{RULES[code].entry}]" + (f" x{n}" if n > 1 else "") for code, n in sorted(counts.items())
    )
    summary = f"{len(findings)} finding{'s' if len(findings) != 1 else ''} in {path.name}" + (
        f": {listed}" if listed else ""
    )
    if not about.distributed and not findings:
        summary = f"{path.name} is not a distributed script: nothing to check"
    return ProbeResult(
        NAME,
        status,
        facts,
        evidence=(Evidence(f"triage lint {path}", "\n".join(f.text() for f in findings) or "no findings"),),
        summary=summary,
        flagged=tuple(flagged),
    )
