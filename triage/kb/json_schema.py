"""The schema as JSON Schema (draft-07), for editors: knowledge/schema.json.

The top level describes an entry file; `definitions` holds every shape and, as `<name>_file`, the
other files (sections, facts, graph, vocabulary).
"""

from __future__ import annotations

from typing import Any

from triage.kb.schema import FILES
from triage.kb.schema_yaml import comment
from triage.kb.shapes import Field, Flag, Fraction, ListOf, MapOf, OneOf, Shape, Text, Texts, ValueType

Json = dict[str, Any]


def json_schema() -> Json:
    """The whole document."""
    definitions: dict[str, Json] = {}
    files = {spec.key: _type(spec.top, definitions) for spec in FILES}
    for spec in FILES:
        if spec.key != "entries":
            name = spec.key.removesuffix(".yaml") + "_file"
            definitions[name] = {"description": f"{spec.name}: {spec.doc}", **files[spec.key]}
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "triage knowledge entry",
        "description": "One entry of triage's knowledge base (knowledge/entries/*.yaml). Generated from "
        "triage/kb/schema.py by `triage kb build`; do not edit.",
        "allOf": [files["entries"]],
        "definitions": dict(sorted(definitions.items())),
    }


def _text(field: Field | None) -> Json:
    if field is not None and field.allowed:
        return {"type": "string", "enum": list(field.allowed)}
    if field is not None and field.pattern:
        return {"type": "string", "pattern": f"^(?:{field.pattern})$"}
    return {"type": "string", "pattern": r"\S"}


def _type(kind: ValueType, definitions: dict[str, Json], field: Field | None = None) -> Json:
    if isinstance(kind, Text):
        return _text(field)
    if isinstance(kind, Texts):
        out: Json = {"type": "array", "items": _text(field)}
        if field is not None and field.min_items:
            out["minItems"] = field.min_items
        return out
    if isinstance(kind, Flag):
        return {"type": "boolean"}
    if isinstance(kind, Fraction):
        return {"type": "number", "exclusiveMinimum": 0, "maximum": 1}
    if isinstance(kind, ListOf):
        out = {"type": "array", "items": _type(kind.item, definitions)}
        if field is not None and field.min_items:
            out["minItems"] = field.min_items
        return out
    if isinstance(kind, MapOf):
        out = {"type": "object", "additionalProperties": _type(kind.value, definitions)}
        if kind.key.pattern:
            out["propertyNames"] = {"pattern": f"^(?:{kind.key.pattern})$"}
        if field is not None and field.min_items:
            out["minProperties"] = field.min_items
        return out
    if isinstance(kind, OneOf):
        for name, variant in kind.variants.items():
            _define(variant, definitions, tag=(kind.tag.name, name))
        refs = [{"$ref": f"#/definitions/{v.name}"} for v in kind.variants.values()]
        return {"type": "object", "required": [kind.tag.name], "oneOf": refs}
    _define(kind, definitions)
    ref = {"$ref": f"#/definitions/{kind.name}"}
    if kind.shorthand:
        return {"anyOf": [_text(kind.field(kind.shorthand)), ref]}
    return ref


def _define(shape: Shape, definitions: dict[str, Json], tag: tuple[str, str] | None = None) -> None:
    if shape.name in definitions:
        return
    definitions[shape.name] = {}  # reserve the name before recursing
    properties: Json = {}
    for field in shape.fields:
        if tag is not None and field.name == tag[0]:
            properties[field.name] = {"const": tag[1], "description": field.doc}
            continue
        properties[field.name] = {"description": comment(field), **_type(field.type, definitions, field)}
    definitions[shape.name] = {
        "type": "object",
        "description": shape.doc,
        "properties": properties,
        "required": [f.name for f in shape.fields if f.required],
        "additionalProperties": False,
    }
