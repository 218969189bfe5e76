"""`triage ask TEXT | -`: the best entry for a description or a pasted error, with alternatives.

This is the path users feel: it loads the compiled knowledge (JSON) and rapidfuzz, nothing else
heavy. No yaml, markdown-it, textual or torch import happens here.
"""

from __future__ import annotations

import argparse

from triage.core.exitcodes import Exit

HELP = 'name the most likely cause and its fix (triage ask "hangs at end of epoch", or - for stdin)'
DESCRIPTION = (
    "Match a description in your own words, or pasted error output, against the knowledge base. Prints the "
    "best entry (why it happens, the fix, whether the fix needs experiment verification) and the closest "
    "alternatives with their scores. Exit status: 0 a match, 1 nothing matches well (or the problem is out "
    "of scope), 2 bad input. For long logs from many ranks use `triage log`."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("text", nargs="*", help="the symptom in your words, or - to read a paste from stdin")
    parser.add_argument(
        "--top", type=int, default=4, metavar="N", help="how many entries to list (default 4)"
    )
    parser.add_argument("--json", action="store_true", help="print the ranking as JSON")
    parser.add_argument("--brief", action="store_true", help="only the ranking, not the best entry's fix")


def run(args: argparse.Namespace) -> int:
    from triage.cli._common import check_argv_text, entry_json, print_lines, read_stdin_text
    from triage.core.errors import UserError
    from triage.core.matcher import rank
    from triage.kb.loader import load_kb

    if args.text == ["-"]:
        text = read_stdin_text(hint="; use `triage log -` for long logs")
    else:
        text = check_argv_text(" ".join(args.text))
    if not text.strip():
        raise UserError(
            'empty query: describe the symptom (triage ask "hangs at end of epoch") or pipe an error with -'
        )
    if not 1 <= args.top <= 50:
        raise UserError("--top must be between 1 and 50")
    kb = load_kb()
    match = rank(kb, text, top=args.top)
    if args.json:
        import json

        best = match.best
        payload = {
            "verdict": match.verdict,
            "best": entry_json(kb, best.entry) | {"score": best.score}
            if best and match.verdict != "no_match"
            else None,
            "hits": [
                {
                    "id": h.entry.id,
                    "title": h.entry.title,
                    "score": h.score,
                    "kind": h.entry.kind,
                    "reasons": h.reasons,
                }
                for h in match.hits
            ],
        }
        print(json.dumps(payload, indent=2, ensure_ascii=False))
    else:
        print_lines(_report(kb, match, args.brief))
    return Exit.OK if match.verdict == "match" else Exit.NOT_FOUND


def _report(kb: object, match: object, brief: bool) -> list[str]:
    from triage.core.matcher import Match
    from triage.core.model import KnowledgeBase
    from triage.render.entry_text import entry_lines
    from triage.render.terminal import BOLD, DIM, style_for

    assert isinstance(kb, KnowledgeBase) and isinstance(match, Match)
    style = style_for()
    lines: list[str] = []
    best = match.best
    if match.verdict == "no_match" or best is None:
        lines.append(style.paint("No entry matches this well.", BOLD))
        lines.append("Try other words, paste the exact error line, or walk the questions with `triage`.")
        lines += ["", "Closest entries, for what they are worth:"]
        lines += [f"  {h.entry.id:<5} {h.score:.2f}  {h.entry.title}" for h in match.hits]
        return lines
    if not brief:
        lines += [
            style.paint(f"Best match ({best.score:.2f})", DIM),
            *entry_lines(kb, best.entry, style, full=False),
        ]
        lines.append("")
    alternatives = match.hits[1:] if not brief else match.hits
    if alternatives:
        lines.append(style.paint("Alternatives" if not brief else "Ranking", BOLD))
        lines += [f"  {h.entry.id:<5} {h.score:.2f}  {h.entry.title}" for h in alternatives]
        lines.append(style.paint("  (triage show ID for any of them)", DIM))
    return lines
