"""The vocabulary the knowledge schema is written in: value types, fields, shapes.

`triage.kb.schema` uses these to describe every file of the knowledge base once. The same
description drives validation (`triage.kb.rules`), building the typed model
(`triage.kb.build`) and the generated documentation and JSON Schema (`triage.kb.generate`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


class _NoDefault:
    def __repr__(self) -> str:
        return "NO_DEFAULT"


NO_DEFAULT: Any = _NoDefault()


@dataclass(frozen=True)
class Text:
    """A non-empty string (surrounding white space is dropped)."""

    def accepts(self, value: object) -> bool:
        """Whether the value has this type."""
        return isinstance(value, str) and bool(value.strip())

    expected = "a non-empty string"
    hint = "quote the value if YAML reads it as another type"


@dataclass(frozen=True)
class Texts:
    """A list of non-empty strings."""

    def accepts(self, value: object) -> bool:
        """Whether the value has this type."""
        return isinstance(value, list) and all(isinstance(v, str) and v.strip() for v in value)

    expected = "a list of non-empty strings"
    hint = "write one quoted string per `- ` item"


@dataclass(frozen=True)
class Flag:
    """true or false."""

    def accepts(self, value: object) -> bool:
        """Whether the value has this type."""
        return isinstance(value, bool)

    expected = "true or false"
    hint = "write true or false, unquoted"


@dataclass(frozen=True)
class Fraction:
    """A number in (0, 1]."""

    def accepts(self, value: object) -> bool:
        """Whether the value has this type."""
        return not isinstance(value, bool) and isinstance(value, int | float) and 0 < value <= 1

    expected = "a number in (0, 1]"
    hint = "write a number above 0 and at most 1, such as 0.8"


@dataclass(frozen=True)
class Key:
    """The keys of a MapOf: what they name and the form they must have."""

    doc: str
    pattern: str = ""
    form: str = ""  # the pattern in words, for messages
    example: str = "name"
    hint: str = ""  # how to fix a key of the wrong form
    bool_as_text: bool = False  # YAML reads `true:` as a bool; the key stands for the string "true"

    def matches(self, key: object) -> bool:
        """Whether a key has the required form."""
        if not self.pattern:
            return True
        return isinstance(key, str) and re.fullmatch(self.pattern, key) is not None

    def accepts(self, key: object) -> bool:
        """Whether a key as YAML read it has the required form."""
        return self.matches(self.text(key))

    def text(self, key: object) -> str:
        """The key as the string it stands for."""
        if self.bool_as_text and isinstance(key, bool):
            return str(key).lower()
        return str(key)


@dataclass(frozen=True)
class Shape:
    """A mapping with named fields; `model` builds the typed value from them."""

    name: str
    doc: str
    fields: tuple[Field, ...]
    model: Callable[..., Any] | None = None
    shorthand: str = ""  # a plain string in place of the mapping stands for {shorthand: string}
    key_field: str = ""  # inside a MapOf, the model argument that receives the key
    open: bool = False  # other keys are allowed (only for the tag-only shape of an unknown variant)
    example_key: str = ""  # inside a MapOf, the key the generated example gives it

    def accepts(self, value: object) -> bool:
        """Whether the value has this type (the fields are checked one by one elsewhere)."""
        return isinstance(value, dict) or (bool(self.shorthand) and Text().accepts(value))

    @property
    def expected(self) -> str:
        """The type in words, for messages."""
        return "a mapping or a quoted string" if self.shorthand else "a mapping"

    @property
    def hint(self) -> str:
        """How to write a value of this type."""
        names = ", ".join(f.name for f in self.fields if f.required) or "its fields"
        return f"indent its fields under it ({names})"

    def field(self, name: str) -> Field | None:
        """The field called `name`, if the shape has one."""
        return next((f for f in self.fields if f.name == name), None)

    def as_mapping(self, value: object) -> Mapping[Any, Any] | None:
        """The value as a mapping of fields (expanding the shorthand), or None."""
        if isinstance(value, dict):
            return value
        if self.shorthand and Text().accepts(value):
            return {self.shorthand: value}
        return None


@dataclass(frozen=True)
class ListOf:
    """A list whose items each have one shape."""

    item: Shape

    def accepts(self, value: object) -> bool:
        """Whether the value has this type (the items are checked one by one elsewhere)."""
        return isinstance(value, list)

    expected = "a list"
    hint = "write one `- ` item per line, or `[]` for none"


@dataclass(frozen=True)
class MapOf:
    """A mapping from keys of one form to values of one type."""

    key: Key
    value: ValueType
    doc: str = ""  # what each value holds

    def accepts(self, value: object) -> bool:
        """Whether the value has this type (the entries are checked one by one elsewhere)."""
        return isinstance(value, dict)

    expected = "a mapping"
    hint = "write one `key: value` per line, indented under it"


@dataclass(frozen=True)
class OneOf:
    """A mapping whose `tag` field says which of several shapes it has."""

    tag: Field
    variants: Mapping[str, Shape]
    doc: str

    def accepts(self, value: object) -> bool:
        """Whether the value has this type (the fields are checked one by one elsewhere)."""
        return isinstance(value, dict)

    expected = "a mapping"

    @property
    def hint(self) -> str:
        """How to write a value of this type."""
        return f"give `{self.tag.name}:` ({' or '.join(self.variants)}) and its fields"

    def shape_for(self, data: Mapping[Any, Any]) -> Shape:
        """The variant the data names, or a shape holding only the tag when it names none."""
        tag = data.get(self.tag.name)
        variant = self.variants.get(tag) if isinstance(tag, str) else None
        return variant or Shape(self.tag.name, self.doc, (self.tag,), open=True)


ValueType = Text | Texts | Flag | Fraction | Shape | ListOf | MapOf | OneOf


@dataclass(frozen=True)
class Field:
    """One field of a shape: its type, whether it is required, what it may hold, what it means."""

    name: str
    type: ValueType
    doc: str
    required: bool = False
    allowed: tuple[str, ...] = ()  # for Text and Texts: the only values it may hold
    pattern: str = ""  # for Text: the form the value must have (a regular expression)
    form: str = ""  # the pattern in words, for messages
    min_items: int = 0  # for Texts, ListOf and MapOf
    hint: str = ""  # how to fix a value that breaks the field's constraints
    default: Any = NO_DEFAULT  # what the model gets when the field is absent (else the type's empty value)
    example: Any = None  # for the generated documentation
    extra: Mapping[str, Any] = field(default_factory=dict)  # more JSON Schema keywords for editors
