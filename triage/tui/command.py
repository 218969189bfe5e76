"""`triage` with no command: the interactive app (the walk, live probes, the fix)."""

from __future__ import annotations

import argparse
from pathlib import Path

from triage.core.exitcodes import Exit

HELP = "the interactive app (the default): walk, probe, fix"
DESCRIPTION = (
    "Open the interactive triage app: answer a few questions (or search, or paste an error), let triage "
    "probe this machine where it can, and end at the fix with a note on whether the change needs the "
    "experiment re-checked. Keys: digits/arrows/Enter answer, Esc goes back or cancels a probe, / searches, "
    "Ctrl+P jumps to any entry, t switches light/dark, q quits."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the command's arguments on its parser."""
    from probes.options import add_probe_arguments

    add_probe_arguments(parser)
    parser.add_argument(
        "--report-dir",
        type=Path,
        metavar="DIR",
        help="where exported reports go, created at the first export if missing (default: current directory)",
    )
    parser.add_argument("--light", action="store_true", help="start with the light theme")


def run(args: argparse.Namespace) -> int:
    """Run the command; returns its exit status."""
    import sys

    from probes.options import probe_options
    from probes.runners import NoProbes
    from triage.core.errors import UserError

    options = probe_options(args)
    if args.report_dir is not None:
        _check_report_dir(args.report_dir)
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise UserError(
            "the interactive app needs a terminal; in scripts use `triage walk --answer NODE=N --json` "
            "or `triage ask`"
        )
    from triage.tui.app import make_app

    runner = NoProbes("probes switched off (--no-probes)") if args.no_probes else None
    app = make_app(
        runner=runner,
        options=options,
        report_dir=args.report_dir,
        theme="textual-light" if args.light else "textual-dark",
        handle_signals=True,
    )
    app.run()
    return app.return_code or Exit.OK


def _check_report_dir(path: Path) -> None:
    """A folder, or a name the first export can create one at (its parent is a folder)."""
    from triage.core.errors import UserError

    if path.is_dir():
        return
    if path.exists() or path.is_symlink():
        raise UserError(f"--report-dir: not a directory: {path}")
    if not path.absolute().parent.is_dir():
        raise UserError(f"--report-dir: {path}: its parent folder does not exist")
