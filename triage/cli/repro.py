"""`triage repro ID`: run a failure reproduction, show its real output, then diagnose it.

The reproductions (triage/repro) are small training scripts that fail on CPU with gloo the
way an entry describes, so a user can watch the failure happen and learn what its output looks
like before meeting it in a real job. Needs torch; nothing else in triage does.
"""

from __future__ import annotations

import argparse
import sys

from triage.core.errors import UserError
from triage.core.exitcodes import Exit

HELP = "watch a real failure happen on CPU, then diagnose it"
DESCRIPTION = (
    "Run one of the bundled failure reproductions under real torch (gloo on CPU), bounded in time "
    "and cleaned up afterwards, print its output, then run `triage log` on that output. "
    "`triage repro --list` shows them, and the settings each can run in (--setting): debug "
    "variables, torchrun --tee 3 or --log-dir, a collector's timestamps."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the command's arguments on its parser."""
    parser.add_argument("id", nargs="?", help="the reproduction to run (an entry id: D1, D20, MN3, ...)")
    parser.add_argument("--list", action="store_true", help="list the reproductions")
    parser.add_argument("--save", metavar="FILE", help="also write the captured output to FILE")
    parser.add_argument(
        "--setting",
        default="default",
        metavar="NAME",
        help="how the job is launched and its output collected (default: default; --list shows them)",
    )


def run(args: argparse.Namespace) -> int:
    """Run the command; returns its exit status."""
    from triage.core.errors import shown
    from triage.repro import SCENARIOS, find
    from triage.repro.settings import SETTINGS, setting

    if args.list or args.id is None:
        for item in SCENARIOS:
            names = " ".join(s.name for s in item.settings())
            print(f"{item.id:<9} {item.title}  (bound {item.bound_s:.0f} s)\n      settings: {names}")
        print("\nsettings:")
        for option in SETTINGS:
            print(f"  {option.name:<15} {option.title}")
        return Exit.OK
    scenario = find(args.id) if args.id.strip() else None
    if scenario is None:
        known = ", ".join(s.id for s in SCENARIOS)
        raise UserError(f"no reproduction for {shown(args.id)}; there are: {known}")
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        raise UserError("reproductions need torch: pip install 'triage[torch]'")
    if sys.platform != "linux":
        raise UserError("reproductions need Linux (their clean-up reads /proc)")
    if scenario.missing():
        raise UserError(f"{scenario.id} needs {'; '.join(scenario.missing())}: pip install it first")
    chosen = setting(args.setting)
    if chosen is None or chosen not in scenario.settings():
        why = scenario.skip.get(args.setting, "")
        offered = ", ".join(s.name for s in scenario.settings())
        reason = f" ({why})" if why else ""
        raise UserError(f"--setting {shown(args.setting)}: {scenario.id} runs in {offered}{reason}")
    if args.save is not None:
        _check_writable(args.save)  # before a run of up to a minute, not after it

    from triage.repro.runner import run as run_scenario

    print(
        f"== {scenario.id}: {scenario.title}, {chosen.title} (at most {scenario.bound_s:.0f} s)", flush=True
    )

    def echo(line: str) -> None:
        sys.stdout.write("  | " + line)
        sys.stdout.flush()

    result = run_scenario(scenario, echo=echo, setting=chosen)
    status = "stopped at its time bound" if result.timed_out else f"exited with {result.returncode}"
    print(f"== it {status} after {result.duration_s:.1f} s; every process it started has ended.", flush=True)
    if args.save:
        try:
            with open(args.save, "w", encoding="utf-8") as handle:
                handle.write(result.output)
        except OSError as exc:
            raise UserError(f"{args.save}: cannot be written ({exc.strerror or exc})") from None
    for name, text in sorted(result.files.items()):
        print(f"== {name} (written by torchrun --log-dir):", flush=True)
        for line in text.splitlines():
            echo(line + "\n")
    print("== triage log on that output:\n", flush=True)
    return _diagnose(result.sources(), scenario.id)


def _check_writable(path: str) -> None:
    import os

    from triage.core.errors import shown

    name = shown(path)
    if not path.strip():
        raise UserError("--save: the file name is empty")
    if os.path.isdir(path):
        raise UserError(f"--save {name}: is a directory; name a file")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise UserError(f"--save {name}: the directory {shown(parent)} does not exist")
    if not os.access(parent, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise UserError(f"--save {name}: cannot be written (permission denied)")


def _diagnose(sources: list[tuple[str, str]], name: str) -> int:
    from triage.cli import log
    from triage.core.logscan.patterns import compile_signatures
    from triage.core.logscan.scanner import Scanner
    from triage.core.logscan.verdict import decide
    from triage.kb.loader import load_kb

    kb = load_kb()
    scanner = Scanner(compile_signatures(kb))
    for file_name, text in sources:
        source = scanner.source(f"repro-{name}/{file_name}")
        scanner.feed_block(source, text.encode("utf-8"), 1)
    verdict = decide(scanner.scan, kb)
    log.emit(log.verdict_text(scanner.scan, verdict, kb, top=3))
    return Exit.OK if verdict.found else Exit.NOT_FOUND
