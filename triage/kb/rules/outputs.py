"""Rules about the files generated from a valid knowledge base; only `triage kb check` runs them."""

from __future__ import annotations

from collections.abc import Iterator

from triage.kb import compiled
from triage.kb.fingerprint import COMPILED_NAME, fingerprint
from triage.kb.rules.context import Context
from triage.kb.rules.registry import Finding, rule


def display(ctx: Context, name: str) -> str:
    """A generated file's path as messages show it (relative to the knowledge dir's parent)."""
    return f"{ctx.sources.root.name}/{name}"


@rule(
    "KB016",
    "compiled-current",
    finds="a compiled.json that does not match the sources or this version of triage",
    why="`triage ask` loads compiled.json when its fingerprint matches; a stale file slows every run",
    fix="run `triage kb build` and commit the result",
    stage="outputs",
)
def compiled_current(ctx: Context) -> Iterator[Finding]:
    """Report a compiled.json that does not match the sources or this version of triage."""
    if ctx.kb is None:
        return
    root = ctx.sources.root
    target = root / COMPILED_NAME
    stamp = fingerprint(root)
    data = compiled.read(str(target))
    if data is None or data.get("fingerprint") != stamp:
        yield Finding(display(ctx, COMPILED_NAME), 0, "", "does not match the sources")
    elif compiled.to_json(compiled.with_docs(ctx.kb, str(root)), stamp) != target.read_text(encoding="utf-8"):
        yield Finding(display(ctx, COMPILED_NAME), 0, "", "was written by a different version of triage")


@rule(
    "KB016",
    "generated-current",
    finds="a schema.json or README.md schema section that differs from what triage/kb/schema.py generates",
    why="editors and readers would be told a schema the validator does not enforce",
    fix="run `triage kb build` and commit the result",
    stage="outputs",
)
def generated_current(ctx: Context) -> Iterator[Finding]:
    """Report a schema.json or README.md schema section that differs from what triage/kb/schema.py generates."""
    from triage.kb import generate  # it lists the rules, so it is imported once they are registered

    for path in generate.stale(ctx.sources.root):
        yield Finding(display(ctx, path.name), 0, "", "is not what triage/kb/schema.py generates")
