"""`triage kb check|build|codes`: validate the knowledge base and regenerate its compiled form."""

from __future__ import annotations

import argparse
import sys

from triage.core.exitcodes import Exit

HELP = "check the knowledge base, rebuild it, list its codes"
DESCRIPTION = (
    "check: validate every file of the knowledge base and that compiled.json is up to date (exit 2 on any "
    "problem). build: validate, then write compiled.json (and, in the project's knowledge dir, the schema "
    "section of its README.md and schema.json). codes: print the validation codes and the rules "
    "behind each: what it finds, why it matters, how to fix it."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["check", "build", "codes"], help="what to do")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace) -> int:
    import json

    if args.action == "codes":
        from triage.kb.generate import codes_json, codes_text

        print(
            json.dumps(codes_json(), indent=2) if args.json else codes_text(),
            end="" if not args.json else "\n",
        )
        return Exit.OK

    from triage.kb import compiled
    from triage.kb.paths import knowledge_dir
    from triage.kb.sources import COMPILED_NAME, fingerprint, read_sources
    from triage.kb.validate import check

    root = knowledge_dir()
    kb, diagnostics = check(read_sources(root), outputs=args.action == "check")
    if kb is not None and args.action == "build":
        from triage.kb import generate

        (root / COMPILED_NAME).write_text(
            compiled.to_json(compiled.with_docs(kb), fingerprint(root)), encoding="utf-8"
        )
        generate.write(root)
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
