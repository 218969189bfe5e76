"""The schema as annotated YAML: an example of each file with a comment on every field, for the
generated section of knowledge/README.md."""

from __future__ import annotations

import re
import textwrap
from typing import Any

from triage.kb.shapes import (
    NO_DEFAULT,
    Field,
    Flag,
    Fraction,
    ListOf,
    MapOf,
    OneOf,
    Shape,
    Text,
    Texts,
    ValueType,
)

COMMENT_COLUMN = 30
WIDTH = 104


def annotated(top: Shape | ListOf | MapOf) -> list[str]:
    """An example of a whole file, as lines of YAML with comments."""
    lines: list[tuple[str, str]] = []
    _value_lines(top, "", lines, None)
    return [_with_comment(code, comment) for code, comment in lines]


def _with_comment(code: str, comment: str) -> str:
    if not comment:
        return code
    column = max(COMMENT_COLUMN, len(code) + 2)
    wrapped = textwrap.wrap(comment, max(40, WIDTH - column - 2)) or [""]
    out = [f"{code.ljust(column)}# {wrapped[0]}"]
    out += [f"{'':{column}}# {more}" for more in wrapped[1:]]
    return "\n".join(out)


def comment(field: Field) -> str:
    """What a field's comment says: required or its default, the values it allows, its meaning."""
    notes = []
    if field.required:
        notes.append("required")
    if field.min_items:
        notes.append(f"at least {field.min_items}")
    if field.allowed:
        many = isinstance(field.type, Texts)
        notes.append(("any of " if many else "one of ") + (", " if many else " | ").join(field.allowed))
    if field.form:
        notes.append(field.form)
    if field.default is not NO_DEFAULT and field.default not in (None, "", False):
        notes.append(f"default {_scalar(field.default)}")
    head = "; ".join(notes)
    return f"{head}: {field.doc}" if head else field.doc


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    text = str(value)
    if text == "..." or (re.fullmatch(r"[A-Za-z0-9_][\w.:/<>-]*", text) and not text.endswith(":")):
        return text
    return "'" + text.replace("'", "''") + "'"


def _example(kind: ValueType, field: Field | None) -> Any:
    if field is not None and field.example is not None:
        return field.example
    if field is not None and field.allowed:
        return field.allowed[0]
    if isinstance(kind, Texts):
        return ["..."]
    if isinstance(kind, Flag):
        return False
    if isinstance(kind, Fraction):
        return 1.0
    return "..."


def _value_lines(kind: ValueType, indent: str, out: list[tuple[str, str]], field: Field | None) -> None:
    """Lines for the body of a value (what follows `name:` on the next lines)."""
    if isinstance(kind, Shape):
        _shape_lines(kind, indent, out)
    elif isinstance(kind, ListOf):
        start = len(out)
        _shape_lines(kind.item, indent + "  ", out)
        code, note = out[start]
        out[start] = (f"{indent}- {code.lstrip()}", note)
    elif isinstance(kind, MapOf):
        variants = list(kind.value.variants.values()) if isinstance(kind.value, OneOf) else [kind.value]
        tag = kind.value.tag.name if isinstance(kind.value, OneOf) else ""
        for variant in variants:
            key = (
                variant.example_key
                if isinstance(variant, Shape) and variant.example_key
                else kind.key.example
            )
            if isinstance(variant, Shape):
                out.append((f"{indent}{key}:", kind.key.doc))
                _shape_lines(variant, indent + "  ", out, {tag: variant.name} if tag else {})
            else:
                out.append(
                    (f"{indent}{key}: {_inline(_example(variant, None))}", f"{kind.key.doc}: {kind.doc}")
                )


def _inline(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_scalar(v) for v in value) + "]"
    return _scalar(value)


def _shape_lines(
    shape: Shape, indent: str, out: list[tuple[str, str]], fixed: dict[str, str] | None = None
) -> None:
    """Lines for each field of a shape; `fixed` gives the value of a variant's tag."""
    for field in shape.fields:
        kind = field.type
        example = (fixed or {}).get(field.name)
        if example is not None:
            out.append((f"{indent}{field.name}: {example}", comment(field)))
        elif isinstance(kind, Shape | ListOf | MapOf):
            out.append((f"{indent}{field.name}:", comment(field)))
            _value_lines(kind, indent + "  ", out, field)
        elif isinstance(kind, Text) and isinstance(field.example, str) and field.example.endswith("\n"):
            out.append((f"{indent}{field.name}: |", comment(field)))
            out.append((f"{indent}  {field.example.strip()}", ""))
        elif isinstance(kind, Texts) and (field.min_items or len(_inline(_example(kind, field))) > 40):
            out.append((f"{indent}{field.name}:", comment(field)))
            out += [(f"{indent}  - {_scalar(v)}", "") for v in _example(kind, field)]
        else:
            out.append((f"{indent}{field.name}: {_inline(_example(kind, field))}", comment(field)))
