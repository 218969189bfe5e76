"""`triage lint PATH ...`: check training scripts for the bugs that hang or silently corrupt a
distributed run, before it launches on 64 GPUs.

This module is the command: finding and reading the files, the `[tool.triage.lint]` table of
pyproject.toml, and the printing. The analysis is triage.core.lint, which gets source text only.
Shell scripts (`.sh`) are read for torchrun command lines: the script each one starts is linted,
and one started with `--max-restarts` knowing it is restarted (MN5).
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from triage.core.errors import UserError
from triage.core.exitcodes import Exit

# triage.core.lint.model.SEVERITIES, most severe first (not imported: the parser of every command
# is built on each run, and the analyser is only loaded by `run`)
SEVERITIES = ("error", "warning", "info")

if TYPE_CHECKING:
    from triage.core.lint import Finding, LaunchFacts, Selection

HELP = "check a training script for distributed bugs"
DESCRIPTION = (
    "Static analysis of Python training scripts (files or directories; .sh launch scripts too) for the "
    "distributed bugs of the knowledge base: collectives reached on rank 0 only, set_device(RANK), "
    "samplers without set_epoch, every rank saving, FSDP without a wrap policy, loss.backward() under "
    "DeepSpeed, and more. Output: path:line:col: CODE [entry] message. Exit 0: clean; 1: findings; "
    "2: bad input (a missing path, a binary file, a syntax error in a file you named). Files found in a "
    "directory that do not parse are skipped with a note. Silence a line with "
    "`# triage: ignore[TRG021]`; choose codes with [tool.triage.lint] select/ignore in pyproject.toml."
)

MAX_FILE_BYTES = 5_000_000
_SKIP_DIRS = frozenset({"__pycache__", "node_modules", "site-packages", "venv", "env"})
_CONFIG_KEYS = ("select", "ignore")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the command's arguments on its parser."""
    parser.add_argument(
        "paths", nargs="*", metavar="PATH", help="Python scripts, .sh launch scripts or directories"
    )
    parser.add_argument("--json", action="store_true", help="print the findings as JSON")
    parser.add_argument(
        "--explain", metavar="CODE", help="print a rule's page: what it finds, why, an example, the fix"
    )
    parser.add_argument("--rules", action="store_true", help="list every rule with its entry and severity")
    parser.add_argument(
        "--select", metavar="CODES", help="comma-separated codes or prefixes to run (replaces pyproject's)"
    )
    parser.add_argument(
        "--ignore", metavar="CODES", help="comma-separated codes or prefixes to skip (added to pyproject's)"
    )
    parser.add_argument(
        "--min-severity",
        choices=SEVERITIES,
        default="warning",
        help="the least severe findings to show (default: warning; `info` adds advice such as the "
        "default collective timeout or an LR not scaled with the world size). A code named in "
        "--select (or pyproject's select) is always shown",
    )
    parser.add_argument(
        "--config",
        type=Path,
        metavar="PYPROJECT",
        help="read [tool.triage.lint] from this file (default: the nearest pyproject.toml above the current directory)",
    )


def run(args: argparse.Namespace) -> int:
    """Run the command; returns its exit status."""
    if args.explain:
        return _explain(args.explain)
    if args.rules:
        return _list_rules(args.json)
    if not args.paths:
        raise UserError("give a file or directory to lint (or --explain CODE, or --rules)")
    from triage.core.lint import lint_source

    selection = _selection(args)
    work = _collect(args.paths)
    found: list[Finding] = []
    for source in work.sources:
        found += lint_source(source.text, source.display, selection, work.launches.get(source.key))
    floor = SEVERITIES.index(args.min_severity)
    named = selection.select or ()  # codes the user chose by name are shown whatever their severity
    findings = [
        f
        for f in found
        if SEVERITIES.index(f.severity) <= floor or any(f.code.startswith(code) for code in named)
    ]
    hidden = _counts([f for f in found if f not in findings])
    if args.json:
        import json

        print(json.dumps({**_as_json(findings, work), "hidden": hidden}, indent=2, ensure_ascii=False))
    else:
        _print(findings, work, hidden)
    return Exit.NOT_FOUND if findings else Exit.OK


# -- inputs -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Source:
    """A file to lint: how it is shown, its resolved path and its text."""

    display: str  # the path as the user will read it
    key: str  # the resolved path, to match launch scripts with the scripts they start
    text: str


@dataclass
class Work:
    """Everything one lint run reads: sources, launch scripts, what was skipped."""

    sources: list[Source] = field(default_factory=list)
    launches: dict[str, LaunchFacts] = field(default_factory=dict)
    skipped: list[str] = field(
        default_factory=list
    )  # one line each: files found in a directory that do not parse
    shell_files: int = 0


def _collect(paths: list[str]) -> Work:
    """Every input read and parsed; an unusable file the user named is a UserError (exit 2)."""
    work = Work()
    python: list[tuple[Path, bool]] = []
    shells: list[tuple[Path, bool]] = []
    for raw in paths:
        path = Path(raw)
        try:
            info = path.stat()
        except FileNotFoundError:
            raise UserError(f"{raw}: no such file or directory") from None
        except OSError as exc:
            raise UserError(f"{raw}: cannot read: {exc.strerror or exc}") from None
        if stat.S_ISDIR(info.st_mode):
            for found in _walk(path):
                (shells if found.suffix == ".sh" else python).append((found, False))
        else:
            (shells if path.suffix == ".sh" else python).append((path, True))
    for path, named in shells:
        _read_launches(path, named, work, python)
    seen: set[str] = set()
    for path, named in python:
        key = _key(path)
        if key in seen:
            continue
        seen.add(key)
        text = _read(path, named, work)
        if text is not None:
            work.sources.append(Source(str(path), key, text))
    return work


def _walk(root: Path) -> list[Path]:
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _SKIP_DIRS)
        found += [Path(folder) / name for name in sorted(files) if name.endswith((".py", ".sh"))]
    return found


def _key(path: Path) -> str:
    try:
        return str(path.resolve())
    except OSError:
        return str(path.absolute())


def _bytes(path: Path) -> bytes:
    try:
        info = path.stat()
    except OSError as exc:  # a dangling link, or a file gone since the directory was listed
        raise UserError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        raise UserError(f"{path}: not a regular file")
    if info.st_size > MAX_FILE_BYTES:
        raise UserError(f"{path}: {info.st_size:,} bytes, too large to be a training script")
    try:
        return path.read_bytes()
    except OSError as exc:
        raise UserError(f"{path}: cannot read: {exc.strerror or exc}") from None


def _read(path: Path, named: bool, work: Work) -> str | None:
    """The checked source of a Python file; for a file found in a directory, None with a note."""
    from triage.core.lint import SourceError, decode_source, parse

    try:
        text = decode_source(_bytes(path), str(path))
        parse(text, str(path))
        return text
    except SourceError as exc:
        if not named:
            work.skipped.append(str(exc))
            return None
        if path.suffix != ".py" and exc.line is not None:
            raise UserError(
                f"{path}: not Python source ({str(exc).split(': ', 1)[1]} at line {exc.line})"
            ) from None
        raise
    except UserError as exc:
        if named:
            raise
        work.skipped.append(str(exc))
        return None


def _read_launches(path: Path, named: bool, work: Work, python: list[tuple[Path, bool]]) -> None:
    from triage.core.lint import LaunchFacts, SourceError, decode_source, find_launches

    try:
        text = decode_source(_bytes(path), str(path))
    except (SourceError, UserError) as exc:
        if named:
            raise
        work.skipped.append(str(exc))
        return
    work.shell_files += 1
    for launch in find_launches(text):
        if launch.script.startswith("-m "):
            continue
        for base in (path.parent, Path.cwd()):
            script = base / launch.script
            if script.is_file():
                if launch.max_restarts > 0:
                    key = _key(script)
                    work.launches.setdefault(key, LaunchFacts(launch.max_restarts, f"{path}:{launch.line}"))
                python.append((script, False))
                break


# -- configuration ----------------------------------------------------------------------------


def _codes(raw: str | list[Any], where: str) -> tuple[str, ...]:
    from triage.core.lint import RULES

    items = raw.split(",") if isinstance(raw, str) else raw
    codes = []
    for item in items:
        if not isinstance(item, str):
            raise UserError(f'{where}: codes must be strings like "TRG021", got {item!r}')
        code = item.strip().upper()
        if not code:
            continue
        if not any(known.startswith(code) for known in RULES):
            raise UserError(f"{where}: unknown code {item.strip()!r} (see `triage lint --rules`)")
        codes.append(code)
    return tuple(codes)


def _find_config() -> Path | None:
    folder = Path.cwd()
    for candidate in (folder, *folder.parents):
        path = candidate / "pyproject.toml"
        if path.is_file():
            return path
    return None


def _config(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"--config {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read: {exc}") from None
    if "triage" not in text:
        return {}  # no table of ours: spare the TOML parser (and its datetime import)
    import tomllib

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path}: invalid TOML: {exc}") from None
    table = data.get("tool", {}).get("triage", {}).get("lint", {})
    if not isinstance(table, dict):
        raise UserError(f"{path}: [tool.triage.lint] must be a table")
    for key in table:
        if key not in _CONFIG_KEYS:
            raise UserError(
                f"{path}: unknown key {key!r} in [tool.triage.lint] (known: {', '.join(_CONFIG_KEYS)})"
            )
    for key in _CONFIG_KEYS:
        if key in table and not isinstance(table[key], list):
            raise UserError(f"{path}: [tool.triage.lint] {key} must be a list of codes")
    return table


def _selection(args: argparse.Namespace) -> Selection:
    from triage.core.lint import Selection

    path = args.config if args.config is not None else _find_config()
    table = _config(path)
    where = f"{path} [tool.triage.lint]"
    select = _codes(table["select"], f"{where} select") if "select" in table else None
    ignore = _codes(table.get("ignore", []), f"{where} ignore")
    if args.select:
        select = _codes(args.select, "--select")
    if args.ignore:
        ignore += _codes(args.ignore, "--ignore")
    return Selection(select, ignore)


# -- output -----------------------------------------------------------------------------------


def _explain(raw: str) -> int:
    from triage.cli._common import print_lines
    from triage.core.lint import rule
    from triage.kb.loader import load_kb
    from triage.render.lint_page import rule_lines
    from triage.render.terminal import style_for

    found = rule(raw)
    if found is None:
        raise UserError(f"unknown lint code {raw!r} (see `triage lint --rules`)")
    print_lines(rule_lines(found, load_kb(), style_for()))
    return Exit.OK


def _list_rules(as_json: bool) -> int:
    from triage.core.lint import RULES

    if as_json:
        import json

        rows = [
            {"code": r.code, "entry": r.entry, "severity": r.severity, "name": r.name, "message": r.message}
            for r in RULES.values()
        ]
        print(json.dumps({"rules": rows}, indent=2))
        return Exit.OK
    for r in RULES.values():
        print(f"{r.code}  {r.entry:<4} {r.severity:<7}  {r.message}")
    return Exit.OK


def _counts(findings: list[Finding]) -> dict[str, int]:
    counts = {"error": 0, "warning": 0, "info": 0}
    for finding in findings:
        counts[finding.severity] += 1
    return counts


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _print(findings: list[Finding], work: Work, hidden: dict[str, int]) -> None:
    from triage.core.lint import RULES
    from triage.render.terminal import BLUE, BOLD, RED, YELLOW, style_for

    style = style_for()
    colours = {"error": RED, "warning": YELLOW, "info": BLUE}
    for note in work.skipped:
        print(f"triage: skipped {note}", file=sys.stderr)
    for f in findings:
        code = style.paint(f.code, BOLD, colours[f.severity])
        print(f"{f.path}:{f.line}:{f.col}: {code} [{f.entry}] {f.message}")
    files = _plural(len(work.sources), "file")
    not_shown = ", ".join(_plural(n, word) for word, n in hidden.items() if n)
    below = f" ({not_shown} below --min-severity not shown)" if not_shown else ""
    if not findings:
        print(f"All clear: {files} checked, no findings{below}.")
        return
    print()
    for code in sorted({f.code for f in findings}):
        r = RULES[code]
        print(f"  {code} ({r.severity}): {r.fix}. More: triage lint --explain {code}, triage show {r.entry}")
    counts = _counts(findings)
    parts = ", ".join(_plural(n, word) for word, n in counts.items() if n)
    print(f"Found {_plural(len(findings), 'finding')} ({parts}) in {files}{below}.")


def _as_json(findings: list[Finding], work: Work) -> dict[str, Any]:
    from triage.core.lint import RULES

    return {
        "findings": [
            {
                "code": f.code,
                "entry": f.entry,
                "severity": f.severity,
                "path": f.path,
                "line": f.line,
                "col": f.col,
                "message": f.message,
                "fix": RULES[f.code].fix,
            }
            for f in findings
        ],
        "counts": _counts(findings),
        "files": len(work.sources),
        "skipped": work.skipped,
    }
