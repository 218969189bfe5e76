"""Rules that follow the schema (triage.kb.schema) over every value: required fields, types,
allowed values, unknown fields, the form of ids and keys, and minimum counts."""

from __future__ import annotations

import re
from collections.abc import Iterator

from triage.kb.rules.context import Context, join
from triage.kb.rules.registry import Finding, rule
from triage.kb.shapes import Text, Texts


@rule(
    "KB007",
    "required-field",
    finds="a required field that is absent or empty",
    why="every front end shows these fields; an entry without them cannot be rendered or matched",
    fix="add the field with a non-empty value",
)
def required_field(ctx: Context) -> Iterator[Finding]:
    """Report a required field that is absent or empty."""
    for place in ctx.places():
        for field in place.shape.fields:
            if field.required and place.data.get(field.name) is None:
                where = join(place.where, field.name)
                yield Finding(
                    place.src,
                    place.line_of(field.name),
                    where,
                    "is missing",
                    f"add `{field.name}:`, {field.doc}",
                )


@rule(
    "KB008",
    "field-type",
    finds="a value of the wrong type: a number where text belongs, a string where a list belongs",
    why="YAML guesses types (yes, 1.0, null); a guessed type would be silently misread",
    fix="write the value as the schema says (knowledge/README.md)",
)
def field_type(ctx: Context) -> Iterator[Finding]:
    """Report a value of the wrong type: a number where text belongs, a string where a list belongs."""
    for value in ctx.values():
        if not value.type.accepts(value.value):
            yield Finding(
                value.src, value.line, value.where, f"must be {value.type.expected}", value.type.hint
            )


@rule(
    "KB008",
    "allowed-value",
    finds="a value outside the field's fixed list (an entry's kind, a fact's type, a verify change)",
    why="code branches on these values; one it does not know would be ignored",
    fix="use one of the values the field allows",
)
def allowed_value(ctx: Context) -> Iterator[Finding]:
    """Report a value outside the field's fixed list (an entry's kind, a fact's type, a verify change)."""
    for value in ctx.values():
        field = value.field
        if field is None or not field.allowed or not value.type.accepts(value.value):
            continue
        items = (
            [value.value]
            if isinstance(value.type, Text)
            else value.value
            if isinstance(value.type, Texts)
            else []
        )
        for item in items:
            if item.strip() not in field.allowed:
                yield Finding(
                    value.src,
                    value.line,
                    value.where,
                    f"{item.strip()!r} is not a known {field.name}",
                    f"use {'one' if isinstance(value.type, Text) else 'any'} of {', '.join(field.allowed)}",
                )


@rule(
    "KB013",
    "unknown-field",
    finds="a key the schema does not define (often a misspelt field)",
    why="a misspelt optional field is silently ignored, so its content never reaches users",
    fix="fix the spelling, or remove the field",
)
def unknown_field(ctx: Context) -> Iterator[Finding]:
    """Report a key the schema does not define (often a misspelt field)."""
    for place in ctx.places():
        if place.shape.open:
            continue
        names = [f.name for f in place.shape.fields]
        for key in place.data:
            if key not in names:
                article = "an" if place.shape.name[0] in "aeiou" else "a"
                yield Finding(
                    place.src,
                    place.line_of(key),
                    join(place.where, str(key)),
                    f"is not a field of {article} {place.shape.name}",
                    f"known fields: {', '.join(names)}",
                )


@rule(
    "KB009",
    "id-format",
    finds="an id or a key that does not have its required form (entry ids, node ids, vocabulary terms)",
    why="ids are typed by users and linked between files; one odd form breaks lookups and links",
    fix="rename it to the required form",
)
def id_format(ctx: Context) -> Iterator[Finding]:
    """Report an id or a key that does not have its required form (entry ids, node ids, vocabulary terms)."""
    for value in ctx.values():
        field, key = value.field, value.key
        text = value.value.strip() if isinstance(value.value, str) else ""
        if field is not None and field.pattern and text and not re.fullmatch(field.pattern, text):
            yield Finding(
                value.src,
                value.line,
                value.where,
                f"{text!r} is not a valid {field.name}",
                f"use {field.form}",
            )
        if key is not None and not key.accepts(value.raw_key):
            yield Finding(value.src, value.line, value.where, f"must be {key.form}", key.hint)


@rule(
    "KB011",
    "min-items",
    finds="a list with fewer items than it needs (symptom phrasings, a question's options, a probe's branches)",
    why="matching needs several phrasings to rank well; a question needs a choice; a probe node needs a branch",
    fix="add items",
)
def min_items(ctx: Context) -> Iterator[Finding]:
    """Report a list with fewer items than it needs (symptom phrasings, a question's options, a probe's branches)."""
    for value in ctx.values():
        field = value.field
        if field is None or not field.min_items or not value.type.accepts(value.value):
            continue
        count = len(value.value)
        if count < field.min_items:
            yield Finding(
                value.src,
                value.line,
                value.where,
                f"has {count}, needs at least {field.min_items}",
                field.hint,
            )
