"""`triage show ID`: one entry, rendered for the terminal, as JSON, or as its Markdown source."""

from __future__ import annotations

import argparse

from triage.core.exitcodes import Exit

HELP = "one entry in full (triage show D9)"
DESCRIPTION = (
    "Print one knowledge-base entry: symptoms, why it happens, the fix and whether it needs verification."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the command's arguments on its parser."""
    parser.add_argument("id", help="entry id such as D9, MN3, P5 (case and zero padding do not matter)")
    parser.add_argument("--json", action="store_true", help="print the entry as JSON")


def run(args: argparse.Namespace) -> int:
    """Run the command; returns its exit status."""
    from triage.cli._common import entry_json, print_lines, require_entry
    from triage.kb.loader import load_kb
    from triage.render.entry_text import entry_lines
    from triage.render.terminal import style_for

    kb = load_kb()
    entry = require_entry(kb, args.id)
    if args.json:
        import json

        print(json.dumps(entry_json(kb, entry), indent=2, ensure_ascii=False))
    else:
        print_lines(entry_lines(kb, entry, style_for()))
    return Exit.OK
