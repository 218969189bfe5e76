"""`triage kb check|build|codes|new`: validate the knowledge base, regenerate its compiled form, write a
new entry's skeleton."""

from __future__ import annotations

import argparse
import sys

from triage.core.exitcodes import Exit

HELP = "check, build or extend the knowledge base"
DESCRIPTION = (
    "check: validate every file of the knowledge base and that compiled.json is up to date (exit 2 on any "
    "problem). build: validate, then write compiled.json (and, in the project's knowledge dir, the schema "
    "section of its README.md and schema.json). codes: print the validation codes and the rules "
    "behind each: what it finds, why it matters, how to fix it. new ID --section S: write "
    "entries/<ID>-<slug>.yaml with every field present and a placeholder in each; `kb check` names "
    "each placeholder until it is filled in and the entry is placed in graph.yaml."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the command's arguments on its parser."""
    parser.add_argument("action", choices=["check", "build", "codes", "new"], help="what to do")
    parser.add_argument("id", nargs="?", help="new: the entry id (D24, E21, X7, ...)")
    parser.add_argument("--section", help="new: the section id from sections.yaml")
    parser.add_argument("--title", help="new: the entry's one-line title (also names the file)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace) -> int:
    """Run the command; returns its exit status."""
    import json

    if args.action == "codes":
        from triage.kb.generate import codes_json, codes_text

        print(
            json.dumps(codes_json(), indent=2) if args.json else codes_text(),
            end="" if not args.json else "\n",
        )
        return Exit.OK

    if args.action == "new":
        return _new(args)
    if args.id is not None:
        from triage.core.errors import UserError

        raise UserError(f"kb {args.action} takes no id (only `kb new ID --section S` does)")

    from triage.kb import compiled
    from triage.kb.paths import knowledge_dir
    from triage.kb.sources import COMPILED_NAME, fingerprint, read_sources
    from triage.kb.validate import check

    root = knowledge_dir()
    kb, diagnostics = check(read_sources(root), outputs=args.action == "check")
    if kb is not None and args.action == "build":
        from triage.kb import generate

        (root / COMPILED_NAME).write_text(
            compiled.to_json(compiled.with_docs(kb, str(root)), fingerprint(root)), encoding="utf-8"
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


def _new(args: argparse.Namespace) -> int:
    """Write the skeleton of a new entry and say what to do next."""
    import json

    from triage.core.errors import UserError, shown
    from triage.kb import skeleton
    from triage.kb.paths import knowledge_dir
    from triage.kb.sources import read_sources

    if not args.id:
        raise UserError("kb new needs an entry id: triage kb new E21 --section platform")
    try:
        entry_id = skeleton.check_id(args.id)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    root = knowledge_dir()
    sources = read_sources(root)
    sections_file = sources.top.get("sections.yaml")
    known = (
        [s.get("id") for s in (sections_file.data or [])]
        if sections_file and isinstance(sections_file.data, list)
        else []
    )
    known = [s for s in known if isinstance(s, str)]
    if not args.section:
        raise UserError(f"kb new needs --section: one of {', '.join(known)}")
    if args.section not in known:
        raise UserError(
            f"--section {shown(args.section)} is not in sections.yaml: use one of {', '.join(known)}"
        )
    prefix = skeleton.file_name(entry_id, "x").rsplit("-", 1)[0] + "-"
    for src in sources.entries:
        taken = isinstance(src.data, dict) and src.data.get("id") == entry_id
        if src.path.name.startswith(prefix) or taken:
            raise UserError(f"{entry_id} already exists: {src.rel}")
    path = root / "entries" / skeleton.file_name(entry_id, args.title or entry_id.lower())
    path.write_text(skeleton.render(entry_id, args.section, args.title), encoding="utf-8")
    steps = [
        f"fill in every {skeleton.MARK} placeholder in {path}",
        f"add a question option or probe branch with `target: {entry_id}` to {root / 'graph.yaml'}",
        "run `triage kb check` (it names each placeholder left), then `triage kb build`",
    ]
    if args.json:
        print(json.dumps({"id": entry_id, "path": str(path), "next": steps}, indent=2))
    else:
        print(f"wrote {path}")
        for number, step in enumerate(steps, 1):
            print(f"  {number}. {step}")
    return Exit.OK
