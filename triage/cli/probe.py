"""`triage probe [NAME ...]`: run the live probes, print what they found and the entries it points at.

Thin: the probes (probes.registry) gather facts, triage.core.findings maps facts to entries; this module
parses, prints and picks the exit status (the worst probe status: OK 0, WARN 4, FAIL 5).
"""

from __future__ import annotations

import argparse
import sys
import threading
from typing import TYPE_CHECKING, Any, TextIO

from triage.core.errors import UserError
from triage.core.exitcodes import Exit

if TYPE_CHECKING:
    from triage.core.facts import ProbeResult
    from triage.core.findings import Finding

HELP = "live, read-only probes of this machine (and --script)"
DESCRIPTION = (
    "Run the probes concurrently, each bounded by --timeout: env (launcher, rank variables), gpu (NVML), "
    "net (interfaces, MTU, NCCL_SOCKET_IFNAME, master port), versions (torch, CUDA, NCCL), configs "
    "(Accelerate/DeepSpeed), dist (a torch.distributed mini-test on this machine), lint (the training script "
    "given with --script, read statically), hang (the job running here, as `triage hang` reads it). "
    "Prints a table, the "
    "findings that point at knowledge entries, and exits with the worst status: 0 ok or unavailable, "
    "4 warn, 5 fail or error. Secrets in the environment are redacted in every output."
)
SCHEMA_VERSION = 1
EXIT_FOR_STATUS = {
    "ok": Exit.OK,
    "unavailable": Exit.OK,
    "warn": Exit.WARN,
    "fail": Exit.FAIL,
    "error": Exit.FAIL,
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the command's arguments on its parser."""
    parser.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help="probes to run: env gpu net versions configs dist lint hang (default: all; lint only with --script)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print everything as JSON (schema documented in the README)"
    )
    from probes.options import add_probe_arguments

    add_probe_arguments(parser, timeout_flag="--timeout", default_timeout=10.0, can_switch_off=False)


def _options(args: argparse.Namespace) -> Any:
    from probes.options import probe_options

    return probe_options(args)


def _names(requested: list[str], known: list[str], default: list[str] | None = None) -> list[str]:
    names: list[str] = []
    for raw in requested:
        name = raw.strip().lower()
        if name not in known:
            raise UserError(f"unknown probe {raw!r}; the probes are: {', '.join(known)}")
        if name not in names:
            names.append(name)
    return names or list(default if default is not None else known)


class Progress:
    """One status line on a terminal's stderr, rewritten as probes start and finish."""

    def __init__(self, stream: TextIO, names: list[str]) -> None:
        self.stream = stream
        self.names = names
        self.state: dict[str, str] = {}
        self.lock = threading.Lock()

    def __call__(self, name: str, result: ProbeResult | None) -> None:
        with self.lock:
            self.state[name] = "running" if result is None else result.status
            running = [n for n in self.names if self.state.get(n) == "running"]
            done = sum(1 for n in self.names if self.state.get(n) not in (None, "running"))
            line = f"probing: {done}/{len(self.names)} done" + (
                f", running {', '.join(running)}" if running else ""
            )
            self.stream.write("\r\033[K" + line)
            self.stream.flush()

    def clear(self) -> None:
        with self.lock:
            self.stream.write("\r\033[K")
            self.stream.flush()


def fact_text(value: object) -> str:
    """A fact value as one short string."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return "[" + ",".join(str(v) for v in value) + "]"
    if value == "":
        return '""'
    return str(value)


def _colour(status: str, enabled: bool) -> str:
    codes = {"ok": "32", "unavailable": "2", "warn": "33", "fail": "31", "error": "31;1"}
    return f"\033[{codes[status]}m{status}\033[0m" if enabled and status in codes else status


def format_table(
    results: list[ProbeResult], key_facts: dict[str, tuple[str, ...]], colour: bool = False
) -> str:
    """probe | status | time | key facts, each with its one-line summary below."""
    lines = [f"{'PROBE':<9} {'STATUS':<12} {'TIME':>6}  KEY FACTS"]
    for result in results:
        keys = [k for k in key_facts.get(result.name, ()) if k in result.facts] or list(result.facts)[:4]
        shown = " ".join(f"{k.split('.', 1)[-1]}={fact_text(result.facts[k])}" for k in keys) or "-"
        status = _colour(result.status, colour) + " " * (12 - len(result.status))
        lines.append(f"{result.name:<9} {status} {result.duration_s:>5.2f}s  {shown}")
        if result.summary:
            lines.append(f"{'':<9} {result.summary}")
    return "\n".join(lines)


def format_findings(found: list[Finding], error: str | None) -> str:
    """The findings (entries the flagged facts point at) as text."""
    if error is not None:
        return f"Findings unavailable: {error}"
    if not found:
        return "Findings: nothing the probes flagged points at a knowledge entry."
    lines = ["Findings (facts that support a knowledge entry; `triage show ID` for the fix):"]
    for finding in found:
        lines.append(f"  {finding.entry_id:<5} {finding.title}")
        for match in finding.matches:
            lines.append(f"        {match.fact}={match.value}" + (f": {match.note}" if match.note else ""))
    return "\n".join(lines)


def payload(
    results: list[ProbeResult], options: Any, found: list[Finding], findings_error: str | None
) -> dict[str, Any]:
    """The --json document (schema version 1, see the README)."""
    import socket

    from probes.registry import merged_facts, worst_status
    from triage import __version__
    from triage.core.redact import redact_obj

    worst = worst_status(results)
    data = {
        "schema": SCHEMA_VERSION,
        "triage_version": __version__,
        "host": socket.gethostname(),
        "options": {
            "timeout_s": options.timeout_s,
            "accelerate_config": options.accelerate_config,
            "deepspeed_config": options.deepspeed_config,
            "peer_host": options.peer_host,
        },
        "worst_status": worst,
        "exit_code": int(EXIT_FOR_STATUS[worst]),
        "probes": [r.to_plain() for r in results],
        "facts": merged_facts(results),
        "findings": [
            {
                "entry": f.entry_id,
                "title": f.title,
                "kind": f.kind,
                "text": f.text,
                "matches": [{"fact": m.fact, "value": m.value, "note": m.note} for m in f.matches],
                "confirm_total": f.confirm_total,
            }
            for f in found
        ],
        "findings_error": findings_error,
    }
    redacted = redact_obj(data)
    assert isinstance(redacted, dict)
    return redacted


def run(args: argparse.Namespace) -> int:
    """Run the command; returns its exit status."""
    import json
    import os

    from probes.registry import PROBES, flagged_facts, merged_facts, run_all, worst_status
    from triage.core.findings import findings
    from triage.kb.loader import load_kb

    # The lint probe needs a script: by default it runs only when one is given.
    names = _names(args.names, list(PROBES), [n for n in PROBES if n != "lint" or args.script])
    options = _options(args)
    progress = Progress(sys.stderr, names) if sys.stderr.isatty() else None
    try:
        results = run_all(names, options, progress)
    finally:
        if progress is not None:
            progress.clear()

    findings_error: str | None = None
    found: list[Finding] = []
    try:
        found = findings(merged_facts(results), load_kb(), flagged_facts(results))
    except UserError as exc:
        findings_error = str(exc)  # a broken knowledge base must not hide what the probes saw

    worst = worst_status(results)
    if args.json:
        print(json.dumps(payload(results, options, found, findings_error), indent=2))
    else:
        colour = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
        print(format_table(results, {n: s.key_facts for n, s in PROBES.items()}, colour))
        print()
        print(format_findings(found, findings_error))
    return int(EXIT_FOR_STATUS[worst])
