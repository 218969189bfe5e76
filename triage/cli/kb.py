"""`triage kb check|build|codes`: validate the knowledge base and regenerate its compiled form."""

from __future__ import annotations

import argparse
import sys

from triage.core.exitcodes import Exit

HELP = "check the knowledge base, rebuild it, list its codes"
DESCRIPTION = (
    "check: validate every file of the knowledge base and that compiled.json is up to date (exit 2 on any "
    "problem). build: validate, then write compiled.json. codes: print the table of validation codes."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["check", "build", "codes"], help="what to do")
    parser.add_argument("--json", action="store_true", help="machine-readable diagnostics")


def run(args: argparse.Namespace) -> int:
    import json

    from triage.kb import compiled
    from triage.kb.paths import knowledge_dir
    from triage.kb.sources import COMPILED_NAME, fingerprint, read_sources
    from triage.kb.validate import CODES, Diagnostic, check

    if args.action == "codes":
        if args.json:
            print(json.dumps(CODES, indent=2))
        else:
            for code, text in CODES.items():
                print(f"{code}  {text}")
        return Exit.OK

    root = knowledge_dir()
    sources = read_sources(root)
    kb, diagnostics = check(sources)
    stamp = fingerprint(root)
    target = root / COMPILED_NAME
    if kb is not None and args.action == "build":
        target.write_text(compiled.to_json(compiled.with_docs(kb), stamp), encoding="utf-8")
    elif kb is not None:
        data = compiled.read(str(target))
        if data is None or data.get("fingerprint") != stamp:
            diagnostics.append(
                Diagnostic(
                    "KB016",
                    str(target.relative_to(root.parent)),
                    0,
                    "",
                    "does not match the sources",
                    "run `triage kb build` and commit the result",
                )
            )
        elif compiled.to_json(compiled.with_docs(kb), stamp) != target.read_text(encoding="utf-8"):
            diagnostics.append(
                Diagnostic(
                    "KB016",
                    str(target.relative_to(root.parent)),
                    0,
                    "",
                    "was written by a different version of triage",
                    "run `triage kb build` and commit the result",
                )
            )
    if args.json:
        print(
            json.dumps(
                {
                    "ok": not diagnostics,
                    "entries": len(kb.entries) if kb else None,
                    "diagnostics": [d.__dict__ for d in diagnostics],
                },
                indent=2,
            )
        )
    else:
        for diagnostic in diagnostics:
            print(diagnostic.format(), file=sys.stderr)
        if not diagnostics and kb is not None:
            verb = "built" if args.action == "build" else "ok"
            print(
                f"knowledge {verb}: {len(kb.entries)} entries, {len(kb.graph.nodes)} graph nodes, "
                f"{len(kb.facts)} facts ({root})"
            )
        else:
            print(f"{len(diagnostics)} problem(s) in {root}", file=sys.stderr)
    return Exit.OK if not diagnostics else Exit.USAGE
