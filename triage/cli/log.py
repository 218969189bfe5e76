"""`triage log FILE ... | -`: read failure output of any size and name its cause.

This module is the command: arguments, the order of the steps, and the printing. Reading the input
(refusing binary files, directories, unreadable files and absurdly long lines, and the two engines
that find candidate lines: grep when it is on PATH, else pure Python) is triage.core.logscan.reading;
the scan and the verdict are in triage.core.logscan and never touch a file.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Any

from triage.core.errors import UserError, shown
from triage.core.exitcodes import Exit

if TYPE_CHECKING:
    from triage.core.logscan.scanner import Event, Scan
    from triage.core.logscan.verdict import Verdict
    from triage.core.model import KnowledgeBase
    from triage.core.separate import Question

HELP = "diagnose failure output from many ranks (FILE ... or -)"
DESCRIPTION = (
    "Scan logs of any size (several files such as torchrun's per-rank --log-dir files, or stdin), "
    "find every known failure signature, separate the first real failure from the ranks that only "
    "waited for it, and print the diagnosis with its evidence, fix and verification note. "
    "Exit 0: a failure was diagnosed; 1: no known failure found; 2: bad input."
)

DEFAULT_MAX_LINE = 64 << 20
ENGINES = ("auto", "grep", "python")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the command's arguments on its parser."""
    parser.add_argument("files", nargs="+", metavar="FILE", help="log files, or - for stdin")
    parser.add_argument("--json", action="store_true", help="machine-readable result")
    parser.add_argument("--top", type=int, default=3, metavar="N", help="diagnoses to list (default 3)")
    parser.add_argument(
        "--max-line-bytes",
        type=int,
        default=None,
        metavar="N",
        help="refuse input with a line longer than this (default 64 MiB, or $TRIAGE_LOG_MAX_LINE_BYTES;"
        " not a text log)",
    )
    parser.add_argument(
        "--engine",
        choices=ENGINES,
        default=None,
        help="how candidate lines are found (default auto: grep when available; or $TRIAGE_LOG_ENGINE)",
    )


def settings_from_environment(args: argparse.Namespace) -> None:
    """--max-line-bytes and --engine default to $TRIAGE_LOG_MAX_LINE_BYTES and $TRIAGE_LOG_ENGINE,
    which are checked as the options are: a bad value is a one-line error, never a traceback."""
    if args.max_line_bytes is None:
        raw = os.environ.get("TRIAGE_LOG_MAX_LINE_BYTES", "").strip()
        if raw and not raw.isdigit():
            raise UserError(f"TRIAGE_LOG_MAX_LINE_BYTES must be a number of bytes, not {shown(raw)}")
        args.max_line_bytes = int(raw) if raw else DEFAULT_MAX_LINE
    if args.engine is None:
        args.engine = os.environ.get("TRIAGE_LOG_ENGINE", "").strip() or "auto"
        if args.engine not in ENGINES:
            raise UserError(
                f"TRIAGE_LOG_ENGINE must be one of {', '.join(ENGINES)}, not {shown(args.engine)}"
            )


def run(args: argparse.Namespace) -> int:
    """Run the command; returns its exit status."""
    from triage.kb.loader import load_kb

    if args.top < 1:
        raise UserError("--top must be at least 1")
    settings_from_environment(args)
    if args.max_line_bytes < 1024:
        raise UserError("--max-line-bytes must be at least 1024")
    kb = load_kb()
    scan, verdict = scan_inputs(args.files, kb, engine=args.engine, max_line_bytes=args.max_line_bytes)
    if args.json:
        import json

        text = json.dumps(_as_json(scan, verdict, kb, args.top), indent=2, ensure_ascii=False)
    else:
        text = verdict_text(scan, verdict, kb, args.top)
    emit(text)
    return Exit.OK if verdict.found else Exit.NOT_FOUND


def scan_inputs(
    files: list[str], kb: KnowledgeBase, *, engine: str = "auto", max_line_bytes: int = DEFAULT_MAX_LINE
) -> tuple[Scan, Verdict]:
    """Read the logs (every path checked before any is scanned) and decide the verdict."""
    from triage.core.logscan.patterns import compile_signatures
    from triage.core.logscan.reading import choose_engine, open_input, scan_grep, scan_python
    from triage.core.logscan.scanner import Scanner
    from triage.core.logscan.verdict import decide

    if files.count("-") > 1:
        raise UserError("stdin (-) can be given only once")
    opened = [open_input(name) for name in files]
    signatures = compile_signatures(kb)
    scanner = Scanner(signatures)
    chosen = choose_engine(engine, signatures.unanchored)
    try:
        for name, stream in opened:
            source = scanner.source(name)
            if chosen == "grep":
                scan_grep(scanner, source, name, stream, max_line_bytes, signatures.anchors)
            else:
                scan_python(scanner, source, name, stream, max_line_bytes)
    finally:
        for _, stream in opened:
            if stream is not sys.stdin.buffer:
                stream.close()
    if scanner.scan.lines == 0:
        raise UserError("the log is empty: nothing to scan")
    return scanner.scan, decide(scanner.scan, kb)


def emit(text: str) -> None:
    """Print the result, secrets redacted (logs carry tokens in command lines and URLs)."""
    from triage.cli._common import print_lines
    from triage.core.redact import redact_text

    print_lines([redact_text(text)])


# -- output -------------------------------------------------------------------------------


def verdict_text(scan: Scan, verdict: Verdict, kb: KnowledgeBase, top: int) -> str:
    """The scan's verdict as terminal text, with the best entries."""
    from triage.render.entry_text import entry_lines
    from triage.render.log_text import evidence, evidence_line, rank_rows, shown_score, summary_lines
    from triage.render.ranks import render_ranks
    from triage.render.terminal import BOLD, style_for

    style = style_for()
    lines = summary_lines(scan, verdict)
    picture = render_ranks(rank_rows(scan, verdict), style)
    if len(picture) > 2:  # a picture of one rank says nothing the summary did not
        lines += ["", style.paint("Ranks at a glance", BOLD), *("  " + line for line in picture)]
    lines.append("")
    if not verdict.found:
        lines.append(style.paint("No known failure found.", BOLD))
        closest = verdict.closest[:top]
        if closest:
            lines.append("Closest entries (weak evidence; read them before acting):")
            for entry_id, score, why in closest:
                lines.append(
                    f"  {entry_id:<5} {kb.entries[entry_id].title}  ({shown_score(score):.2f}, {why})"
                )
        lines += _question_lines(kb, verdict, top)
        return "\n".join(lines)
    best = verdict.diagnoses[0]
    entry = kb.entries[best.entry_id]
    verdict_word = "Out of scope" if not entry.covered else "Diagnosis"
    if verdict.by_query_engine:
        verdict_word = f"{verdict_word} (no signature matched; read as a description)"
    lines.append(style.paint(f"{verdict_word}: {entry.id}  {entry.title}", BOLD))
    lines.append(f"  why this entry: {best.reason} (score {shown_score(best.score):.2f})")
    if verdict.only_symptoms:
        lines.append(
            "  only symptoms here: what the log shows (a timeout, a kill, a lost peer, a missing"
            " traceback) follows any failure; the cause is in output not in this log (the first"
            " rank to fail, dmesg). The entries below are candidates."
        )
        lines += _question_lines(kb, verdict, top)
    lines.append("  evidence:")
    lines += [evidence_line(scan, e) for e in evidence(best)]
    others = [d for d in verdict.diagnoses[1:top] if d.score > 0]
    if others:
        lines.append("")
        lines.append("Also consistent with:")
        for other in others:
            lines.append(
                f"  {other.entry_id:<5} {kb.entries[other.entry_id].title}  (score {shown_score(other.score):.2f})"
            )
            shown = evidence(other)
            if shown:
                lines.append(evidence_line(scan, shown[0], indent="        "))
    lines += ["", *entry_lines(kb, entry, style, full=False)]
    return "\n".join(lines)


def _question(kb: KnowledgeBase, verdict: Verdict, top: int) -> Question | None:
    """The question that separates the candidates shown, where the log's evidence cannot: when it
    found nothing (the closest entries) or only symptoms (the diagnoses)."""
    if verdict.found and not verdict.only_symptoms:
        return None
    if verdict.found:
        candidates = [d.entry_id for d in verdict.diagnoses[:top] if d.score > 0]
    else:
        candidates = [entry_id for entry_id, _, _ in verdict.closest[:top]]
    from triage.core.separate import question_among

    return question_among(kb, candidates)


def _question_lines(kb: KnowledgeBase, verdict: Verdict, top: int) -> list[str]:
    question = _question(kb, verdict, top)
    if question is None:
        return []
    ids = [entry_id for _, entry_id in question.options]
    answers = ";  ".join(f'"{label}" -> {entry_id}' for label, entry_id in question.options)
    return [f"  to tell {' from '.join(ids)}, answer: {question.prompt}", f"    {answers}"]


def _question_json(kb: KnowledgeBase, verdict: Verdict, top: int) -> dict[str, Any] | None:
    question = _question(kb, verdict, top)
    if question is None:
        return None
    answers = {entry_id: label for label, entry_id in question.options}
    return {"node": question.node, "prompt": question.prompt, "answers": answers}


def _event_json(scan: Scan, event: Event) -> dict[str, Any]:
    data: dict[str, Any] = {
        "source": scan.sources[event.source],
        "line": event.line,
        "rank": event.rank,
        "kind": event.kind,
        "text": event.text,
    }
    if event.kind == "hit":
        data.update(entry=event.entry_id, weight=event.weight, echo=event.echo)
        if event.role:
            data["context"] = event.role
    elif event.echo:
        data["echo"] = True
    if event.kind == "exit":
        data["exit_code"] = event.exit_code
    return data


def _as_json(scan: Scan, verdict: Verdict, kb: KnowledgeBase, top: int) -> dict[str, Any]:
    from dataclasses import asdict

    from triage.core.redact import redact_obj
    from triage.render.log_text import evidence, rank_rows, shown_score

    diagnoses = []
    for diagnosis in verdict.diagnoses[:top]:
        entry = kb.entries[diagnosis.entry_id]
        diagnoses.append(
            {
                "id": entry.id,
                "title": entry.title,
                "kind": entry.kind,
                "covered": entry.covered,
                "score": shown_score(diagnosis.score),
                "reason": diagnosis.reason,
                "explains_first_failure": diagnosis.explains_first,
                "evidence": [_event_json(scan, e) for e in evidence(diagnosis)],
                "fix": entry.fix,
                "verify": {
                    "needed": entry.verify.needed,
                    "changes": list(entry.verify.changes),
                    "why": entry.verify.why,
                },
            }
        )
    data = {
        "found": verdict.found,
        "sources": scan.sources,
        "lines": scan.lines,
        "signature_lines": scan.hit_lines,
        "signature_hits": scan.hits,
        "ordered_by": verdict.ordered_by,
        "first_failure": _event_json(scan, verdict.first) if verdict.first else None,
        "first_rank": verdict.first_rank,
        "first_rank_reason": verdict.first_rank_reason or None,
        "waiting_ranks": verdict.waiting_ranks,
        "suspect_ranks": verdict.suspect_ranks,
        "torchrun_root_cause_rank": verdict.root_cause_rank,
        "by_query_engine": verdict.by_query_engine,
        "only_symptoms": verdict.only_symptoms,
        "diagnoses": diagnoses if verdict.found else [],
        "closest": []
        if verdict.found
        else [
            {"id": i, "title": kb.entries[i].title, "score": shown_score(s), "why": w}
            for i, s, w in verdict.closest[:top]
        ],
        "ranks": [asdict(row) for row in rank_rows(scan, verdict)],
        "separating_question": _question_json(kb, verdict, top),
    }
    redacted = redact_obj(data)
    assert isinstance(redacted, dict)
    return redacted
