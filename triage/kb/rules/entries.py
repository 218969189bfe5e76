"""Rules about entries beyond their schema: ids and file names, sections, links, the verify note."""

from __future__ import annotations

import re
from collections.abc import Iterator

from triage.core.model import file_prefix
from triage.kb.rules.context import Context
from triage.kb.rules.registry import Finding, rule
from triage.kb.schema import ENTRY_ID_PATTERN


@rule(
    "KB009",
    "id-matches-file-name",
    finds="an entry whose file name does not start with its zero-padded id (D9 in D09-<slug>.yaml)",
    why="people find an entry by its file; a mismatched name sends them to the wrong one",
    fix="name the file <ID>-<slug>.yaml with the id's number zero-padded to two digits",
)
def id_matches_file_name(ctx: Context) -> Iterator[Finding]:
    """Report an entry whose file name does not start with its zero-padded id (D9 in D09-<slug>.yaml)."""
    for src, entry in ctx.all_entries:
        if re.fullmatch(ENTRY_ID_PATTERN, entry.id) and not src.path.name.startswith(
            file_prefix(entry.id) + "-"
        ):
            yield Finding(
                src,
                ctx.line(src, "id"),
                "id",
                f"{entry.id!r} does not match the file name {src.path.name!r}",
                f"name the file {file_prefix(entry.id)}-<slug>.yaml",
            )


@rule(
    "KB010",
    "unique-id",
    finds="two entry files with the same id",
    why="only one of them could ever be shown; the other would vanish silently",
    fix="give each entry its own id",
)
def unique_id(ctx: Context) -> Iterator[Finding]:
    """Report two entry files with the same id."""
    for src, entry in ctx.all_entries:
        first = ctx.entry_files.get(entry.id)
        if entry.id and first is not None and first is not src:
            yield Finding(src, ctx.line(src, "id"), "id", f"{entry.id} is also defined in {first.rel}")


@rule(
    "KB012",
    "section-exists",
    finds="an entry whose `section:` is not an id in sections.yaml",
    why="the entry would be listed under no section, so the site and `triage list` would hide it",
    fix="use a section id from sections.yaml, or add the section there",
)
def section_exists(ctx: Context) -> Iterator[Finding]:
    """Report an entry whose `section:` is not an id in sections.yaml."""
    if not ctx.usable("sections.yaml"):
        return
    known = {s.id for s in ctx.sections}
    for src, entry in ctx.all_entries:
        if entry.section and entry.section not in known:
            yield Finding(
                src,
                ctx.line(src, "section"),
                "section",
                f"{entry.section!r} is not in sections.yaml",
                f"use one of {', '.join(sorted(known))}",
            )


@rule(
    "KB015",
    "related-exists",
    finds="a `related:` id that names no entry",
    why="the link on the entry's page would lead nowhere",
    fix="use an existing entry id such as D19",
)
def related_exists(ctx: Context) -> Iterator[Finding]:
    """Report a `related:` id that names no entry."""
    for entry_id, entry in ctx.entries.items():
        src = ctx.entry_files[entry_id]
        for index, related in enumerate(entry.related):
            if related not in ctx.entries:
                yield Finding(
                    src,
                    ctx.line(src, "related", index),
                    f"related[{index}]",
                    f"{related!r} is not an entry id",
                )


@rule(
    "KB015",
    "related-not-self",
    finds="an entry listed in its own `related:`",
    why="a link to the page the reader is on wastes their attention",
    fix="remove it",
)
def related_not_self(ctx: Context) -> Iterator[Finding]:
    """Report an entry listed in its own `related:`."""
    for entry_id, entry in ctx.entries.items():
        src = ctx.entry_files[entry_id]
        for index, related in enumerate(entry.related):
            if related == entry.id:
                yield Finding(
                    src,
                    ctx.line(src, "related", index),
                    f"related[{index}]",
                    "an entry cannot be related to itself",
                )


@rule(
    "KB015",
    "reference-url",
    finds="a reference whose url is not an http(s) link",
    why="the site renders it as a link; a relative or other-scheme URL breaks or is unsafe",
    fix="give the full https:// URL",
)
def reference_url(ctx: Context) -> Iterator[Finding]:
    """Report a reference whose url is not an http(s) link."""
    for src, entry in ctx.all_entries:
        for index, reference in enumerate(entry.references):
            if reference.url and not reference.url.startswith(("https://", "http://")):
                yield Finding(
                    src,
                    ctx.line(src, "references", index, "url"),
                    f"references[{index}].url",
                    f"{reference.url!r} is not an http(s) link",
                )


@rule(
    "KB006",
    "verify-consistent",
    finds="a verify note whose `needed` disagrees with `changes`",
    why="the experiment-verification badge is shown from `needed`; users rely on it to re-check numbers",
    fix="set needed: true exactly when changes lists what the fix changes",
)
def verify_consistent(ctx: Context) -> Iterator[Finding]:
    """Report a verify note whose `needed` disagrees with `changes`."""
    for src, entry in ctx.all_entries:
        verify = entry.verify
        if verify.needed and not verify.changes:
            yield Finding(
                src,
                ctx.line(src, "verify", "needed"),
                "verify",
                "needed is true but changes is empty",
                "list what the fix changes (batch_size, learning_rate, ...)",
            )
        elif not verify.needed and verify.changes:
            yield Finding(
                src,
                ctx.line(src, "verify", "needed"),
                "verify",
                "needed is false but changes is not empty",
                "set needed: true, or remove changes",
            )


PLACEHOLDERS = ("TODO(kb new)", "TODO-kb-new", r"TODO\(kb new\)")


def _placeholders(value: object, path: tuple[object, ...]) -> Iterator[tuple[object, ...]]:
    """The paths of the string values under `value` that still hold a `triage kb new` placeholder."""
    if isinstance(value, str):
        if any(mark in value for mark in PLACEHOLDERS):
            yield path
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _placeholders(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _placeholders(item, (*path, index))


@rule(
    "KB007",
    "skeleton-filled",
    finds="a value that still holds the placeholder `triage kb new` wrote (TODO(kb new))",
    why="a half-written entry would be shown to users as if it were a diagnosis",
    fix="replace every TODO(kb new) placeholder with real content (see knowledge/README.md)",
)
def skeleton_filled(ctx: Context) -> Iterator[Finding]:
    """Report TODO(kb new) placeholders left in an entry."""
    for src, _ in ctx.all_entries:
        for path in _placeholders(src.data, ()):
            field = "".join(
                f"[{p}]" if isinstance(p, int) else (f".{p}" if i else str(p)) for i, p in enumerate(path)
            )
            yield Finding(src, ctx.line(src, *path), field, "still holds the `triage kb new` placeholder")
