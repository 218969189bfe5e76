"""Building the typed model (triage.core.model) from parsed YAML, following triage.kb.schema.

The build is lenient: a value of the wrong type becomes the field's empty value, so it never
raises. The rules (triage.kb.rules) report every such problem, and a knowledge base with any
diagnostic is not used, so the leniency only keeps the later rules from tripping over it.
"""

from __future__ import annotations

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


def empty(kind: ValueType) -> Any:
    """The value a missing or ill-typed field of this type gets."""
    if isinstance(kind, Text):
        return ""
    if isinstance(kind, Texts | ListOf):
        return ()
    if isinstance(kind, MapOf):
        return {}
    if isinstance(kind, Flag):
        return False
    if isinstance(kind, Fraction):
        return 1.0
    if isinstance(kind, Shape):
        return build_shape(kind, {})
    return None


def build(kind: ValueType, value: Any) -> Any:
    """The typed value of `value`, read as `kind`; None for an unusable mapping in a collection."""
    if isinstance(kind, Text):
        return value.strip() if kind.accepts(value) else ""
    if isinstance(kind, Texts):
        return tuple(v.strip() for v in value) if kind.accepts(value) else ()
    if isinstance(kind, Flag):
        return value if kind.accepts(value) else False
    if isinstance(kind, Fraction):
        return float(value) if kind.accepts(value) else 1.0
    if isinstance(kind, Shape):
        data = kind.as_mapping(value)
        return build_shape(kind, data) if data is not None else None
    if isinstance(kind, OneOf):
        return build_shape(kind.shape_for(value), value) if isinstance(value, dict) else None
    if isinstance(kind, ListOf):
        if not isinstance(value, list):
            return ()
        items = (build(kind.item, item) for item in value)
        return tuple(item for item in items if item is not None)
    if not isinstance(value, dict):
        return {}
    result = {}
    for key, item in value.items():
        if not kind.key.accepts(key):
            continue
        name = kind.key.text(key)
        if isinstance(kind.value, Shape | OneOf):
            shape = kind.value if isinstance(kind.value, Shape) else kind.value.shape_for(item)
            if shape.model is None or not isinstance(item, dict) or not shape.key_field:
                continue
            result[name] = build_shape(shape, item, {shape.key_field: name})
        else:
            result[name] = build(kind.value, item)
    return result


def build_shape(shape: Shape, data: Any, given: dict[str, Any] | None = None) -> Any:
    """The shape's model built from a mapping, each field read by its type."""
    values = dict(given or {})
    for field in shape.fields:
        values[field.name] = _field_value(field, data.get(field.name) if isinstance(data, dict) else None)
    if shape.model is None:
        return None
    return shape.model(**values)


def _field_value(field: Field, raw: Any) -> Any:
    if raw is not None and field.type.accepts(raw):
        return build(field.type, raw)
    return empty(field.type) if field.default is NO_DEFAULT else field.default
