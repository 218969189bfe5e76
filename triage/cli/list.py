"""`triage list`: every entry, grouped by section."""

from __future__ import annotations

import argparse

from triage.core.exitcodes import Exit

HELP = "every entry by section; [verify] marks science changes"
DESCRIPTION = (
    "List every knowledge-base entry by section; entries whose fix needs experiment verification are marked."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the command's arguments on its parser."""
    parser.add_argument("--section", help="only this section id (e.g. hangs, multinode)")
    parser.add_argument("--json", action="store_true", help="print as JSON")


def run(args: argparse.Namespace) -> int:
    """Run the command; returns its exit status."""
    import json

    from triage.cli._common import print_lines
    from triage.core.errors import UserError
    from triage.kb.loader import load_kb
    from triage.render.terminal import BOLD, DIM, YELLOW, style_for

    kb = load_kb()
    sections = [s for s in kb.sections if args.section in (None, s.id)]
    if not sections:
        raise UserError(f"unknown section {args.section!r}; sections: {', '.join(s.id for s in kb.sections)}")
    if args.json:
        out = [
            {
                "section": s.id,
                "title": s.title,
                "entries": [
                    {"id": e.id, "title": e.title, "kind": e.kind, "verify_needed": e.verify.needed}
                    for e in kb.entries.values()
                    if e.section == s.id
                ],
            }
            for s in sections
        ]
        print(json.dumps(out, indent=2, ensure_ascii=False))
        return Exit.OK
    style = style_for()
    lines: list[str] = []
    for section in sections:
        members = [e for e in kb.entries.values() if e.section == section.id]
        if not members:
            continue
        if lines:
            lines.append("")
        lines.append(style.paint(section.title, BOLD) + style.paint(f"  ({section.id})", DIM))
        for entry in members:
            mark = style.paint("  [verify]", YELLOW) if entry.verify.needed else ""
            lines.append(f"  {entry.id:<5} {entry.title}{mark}")
    lines += ["", style.paint("[verify]: the fix changes the science of the run; re-check the numbers.", DIM)]
    print_lines(lines)
    return Exit.OK
