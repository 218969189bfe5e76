"""`triage` with no command: the interactive app (the walk, live probes, the fix)."""

from __future__ import annotations

import argparse
from pathlib import Path

from triage.core.exitcodes import Exit

HELP = "the interactive app (the default): walk the symptoms, probe this machine, reach the fix"
DESCRIPTION = (
    "Open the interactive triage app: answer a few questions (or search, or paste an error), let triage "
    "probe this machine where it can, and end at the fix with a note on whether the change needs the "
    "experiment re-checked. Keys: digits/arrows/Enter answer, Esc goes back or cancels a probe, / searches, "
    "Ctrl+P jumps to any entry, t switches light/dark, q quits."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-probes", action="store_true", help="never probe this machine; always ask instead"
    )
    parser.add_argument(
        "--probe-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="limit for each probe (default 30)",
    )
    parser.add_argument("--accelerate-config", metavar="PATH", help="the Accelerate config file to inspect")
    parser.add_argument("--deepspeed-config", metavar="PATH", help="the DeepSpeed JSON to inspect")
    parser.add_argument(
        "--report-dir",
        type=Path,
        metavar="DIR",
        help="where exported reports go (default: current directory)",
    )
    parser.add_argument("--light", action="store_true", help="start with the light theme")


def run(args: argparse.Namespace) -> int:
    import sys

    from probes.configs import check_option
    from probes.runners import NoProbes
    from triage.core.errors import UserError
    from triage.core.facts import ProbeOptions, check_timeout

    check_timeout("--probe-timeout", args.probe_timeout)
    check_option("--accelerate-config", args.accelerate_config, "Accelerate")
    check_option("--deepspeed-config", args.deepspeed_config, "DeepSpeed")
    if args.report_dir is not None and not args.report_dir.is_dir():
        raise UserError(f"--report-dir: not a directory: {args.report_dir}")
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise UserError(
            "the interactive app needs a terminal; in scripts use `triage walk --answer NODE=N --json` "
            "or `triage ask`"
        )
    from triage.tui.app import make_app

    options = ProbeOptions(
        timeout_s=args.probe_timeout,
        accelerate_config=args.accelerate_config,
        deepspeed_config=args.deepspeed_config,
    )
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
