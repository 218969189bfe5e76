"""`triage ask TEXT | -`: the best entry for a description or a pasted error, with alternatives.

This is the path users feel: it loads the compiled knowledge (JSON), nothing else heavy. No yaml,
markdown-it, textual or torch import happens here.
"""

from __future__ import annotations

import sys
from types import SimpleNamespace

from triage.core.exitcodes import Exit

TYPE_CHECKING = False  # mypy reads it as true; importing it from typing would load typing
if TYPE_CHECKING:
    import argparse

HELP = "the likely cause and fix for a symptom or pasted error"
DESCRIPTION = (
    "Match a description in your own words, or pasted error output, against the knowledge base. Prints the "
    "best entry (why it happens, the fix, whether the fix needs experiment verification) and the closest "
    "alternatives with their scores. Exit status: 0 a match, 1 nothing matches well (or the problem is out "
    "of scope), 2 bad input. For long logs from many ranks use `triage log`."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the command's arguments on its parser."""
    parser.add_argument("text", nargs="*", help="the symptom in your words, or - to read a paste from stdin")
    parser.add_argument(
        "--top", type=int, default=4, metavar="N", help="how many entries to list (default 4)"
    )
    parser.add_argument("--json", action="store_true", help="print the ranking as JSON")
    parser.add_argument(
        "--brief", action="store_true", help="only the ranking ([verify] marks fixes that change the science)"
    )
    parser.add_argument(
        "--full", action="store_true", help="everything: why it happens, the whole fix, symptoms, related"
    )


FLAGS = ("--json", "--brief", "--full")


def parse_fast(argv: list[str]) -> SimpleNamespace | None:
    """The arguments of `ask` (what follows the word) without argparse, whose import costs more
    than the rest of a plain run; None for anything argparse should handle (help, errors, `--`)."""
    values: dict[str, object] = {"text": [], "top": 4, **{flag[2:]: False for flag in FLAGS}}
    words: list[str] = []
    rest = iter(argv)
    for arg in rest:
        if arg in FLAGS:
            values[arg[2:]] = True
        elif arg == "--top" or arg.startswith("--top="):
            raw = arg[len("--top=") :] if "=" in arg else next(rest, "")
            if not raw.isdigit():
                return None
            values["top"] = int(raw)
        elif arg.startswith("-") and arg != "-":
            return None
        else:
            words.append(arg)
    values["text"] = words
    return SimpleNamespace(**values)


def run(args: argparse.Namespace | SimpleNamespace) -> int:
    """Run the command; returns its exit status."""
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
            "evidence": match.evidence,
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
            "question": {
                "node": match.question.node,
                "prompt": match.question.prompt,
                "answers": [{"label": label, "id": entry} for label, entry in match.question.options],
            }
            if match.question
            else None,
        }
        print(json.dumps(payload, indent=2, ensure_ascii=False))
    else:
        print_lines(_report(kb, match, args))
    return Exit.OK if match.verdict == "match" else Exit.NOT_FOUND


def _report(kb: object, match: object, args: argparse.Namespace | SimpleNamespace) -> list[str]:
    import os

    from triage.core.matcher import Hit, Match
    from triage.core.model import KnowledgeBase
    from triage.render.answer import SCREEN_ROWS, answer_lines, question_lines, ranking_line
    from triage.render.terminal import BOLD, style_for

    assert isinstance(kb, KnowledgeBase) and isinstance(match, Match)
    style = style_for()
    lines: list[str] = []
    best = match.best

    def ranking(hits: tuple[Hit, ...]) -> list[str]:
        return [ranking_line(h.entry, h.score) for h in hits]

    if not match.evidence:
        lines.append(style.paint("Nothing in this text points to a failure triage knows.", BOLD))
        lines.append(
            "Say what you see (it hangs, crashes or runs slow; at which step), paste the exact error"
            " line, or walk the questions with `triage`."
        )
        return lines
    if match.verdict == "no_match" or best is None:
        lines.append(style.paint("No entry matches this well.", BOLD))
        lines.append("Try other words, paste the exact error line, or walk the questions with `triage`.")
        lines += ["", "Closest entries, for what they are worth:", *ranking(match.hits)]
        asked = question_lines(match.question, style, unsure=True) if match.question is not None else []
        return [*lines, *(["", *asked] if asked else [])]
    if args.brief:
        return [
            style.paint("Ranking ([verify]: the fix changes the science of the run)", BOLD),
            *ranking(match.hits),
        ]
    rows = SCREEN_ROWS
    if sys.stdout.isatty():
        try:
            rows = max(SCREEN_ROWS, os.get_terminal_size(sys.stdout.fileno()).lines)
        except OSError:
            rows = SCREEN_ROWS
    return answer_lines(
        kb,
        best.entry,
        best.score,
        match.verdict,
        [(h.entry, h.score) for h in match.hits[1:]],
        style,
        question=match.question,
        full=args.full,
        rows=rows,
    )
