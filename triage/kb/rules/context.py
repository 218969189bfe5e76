"""What a rule sees: the parsed files, the model built from them, and a walk over every value the
schema describes (with its file, line and field path)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from triage.core.model import Entry, Fact, Graph, KnowledgeBase, Section
from triage.kb.build import build, build_shape
from triage.kb.schema import ENTRY, ENTRY_ID_PATTERN, FILES, GRAPH, FileSpec
from triage.kb.shapes import Field, Key, ListOf, MapOf, OneOf, Shape, ValueType
from triage.kb.sources import SourceFile, Sources
from triage.kb.yaml_lines import line_of


class Value(NamedTuple):
    """A value the schema describes: a field's value, a list item, or a map entry."""

    src: SourceFile
    where: str  # its path for messages: signatures[0].pattern, nodes.start.options
    value: Any
    type: ValueType
    line: int
    field: Field | None = None  # None for list items and map entries
    key: Key | None = None  # for map entries: the form of their keys
    raw_key: Any = None  # for map entries: the key as YAML read it


class Place(NamedTuple):
    """A mapping the schema gives a shape to."""

    src: SourceFile
    where: str  # the prefix of its fields' paths: "", "verify.", "nodes.start."
    data: Mapping[Any, Any]
    shape: Shape
    line: int

    def line_of(self, key: str) -> int:
        """The line of a field, or of the mapping when the field is absent."""
        return line_of(self.data, key, self.line)


def join(where: str, name: str) -> str:
    """A field path: join("verify", "why") is "verify.why", join("", "[0]") is "[0]"."""
    if not where or name.startswith("["):
        return where + name
    return f"{where}.{name}"


def yaml_key(text: str) -> object:
    """The key YAML read for a branch value held as text: `true:` and `false:` are read as bools."""
    return {"true": True, "false": False}.get(text, text)


@dataclass
class Context:
    """The knowledge base under validation: raw files and the model built from them."""

    sources: Sources
    sections: tuple[Section, ...] = ()
    facts: dict[str, Fact] = field(default_factory=dict)
    entries: dict[str, Entry] = field(default_factory=dict)  # the first entry with each well-formed id
    entry_files: dict[str, SourceFile] = field(default_factory=dict)
    all_entries: list[tuple[SourceFile, Entry]] = field(default_factory=list)  # duplicates included
    graph: Graph | None = None  # None when graph.yaml has no usable `nodes`
    vocabulary: dict[str, tuple[str, ...]] = field(default_factory=dict)
    kb: KnowledgeBase | None = None  # set for the "outputs" rules, which run on a valid base

    @classmethod
    def of(cls, sources: Sources) -> Context:
        """Build the model leniently from every usable file (see triage.kb.build)."""
        ctx = cls(sources)
        for spec, src in ctx.files():
            if spec.key == "sections.yaml":
                ctx.sections = build(spec.top, src.data)
            elif spec.key == "facts.yaml":
                ctx.facts = build(spec.top, src.data)
            elif spec.key == "vocabulary.yaml":
                ctx.vocabulary = build(spec.top, src.data)
            elif spec.key == "graph.yaml" and isinstance(src.data.get("nodes"), dict):
                ctx.graph = build_shape(GRAPH, src.data)
            elif spec.key == "entries":
                entry = build_shape(ENTRY, src.data)._replace(source=f"entries/{src.path.name}")
                ctx.all_entries.append((src, entry))
                if re.fullmatch(ENTRY_ID_PATTERN, entry.id) and entry.id not in ctx.entries:
                    ctx.entries[entry.id] = entry
                    ctx.entry_files[entry.id] = src
        return ctx

    @property
    def graph_file(self) -> SourceFile:
        """graph.yaml."""
        return self.sources.top["graph.yaml"]

    def usable(self, key: str) -> bool:
        """Whether a top-level file parsed with the right top level (rules that read it skip otherwise)."""
        return any(src.rel == self.sources.top[key].rel for _, src in self.files())

    def files_of(self, spec: FileSpec) -> list[SourceFile]:
        """The files of one kind (every entry file, or the one top-level file)."""
        return self.sources.entries if spec.key == "entries" else [self.sources.top[spec.key]]

    def files(self) -> Iterator[tuple[FileSpec, SourceFile]]:
        """Every file that parsed and whose top level has the right type, with its spec."""
        for spec in FILES:
            for src in self.files_of(spec):
                if src.error is None and spec.top.accepts(src.data):
                    yield spec, src

    def values(self) -> Iterator[Value]:
        """Every value the schema describes below the top level, in file order, outermost first."""
        for spec, src in self.files():
            root = Value(src, "", src.data, spec.top, 1)
            yield from (value for value in _walk(root) if value is not root)

    def places(self) -> Iterator[Place]:
        """Every mapping the schema gives a shape to (top levels included), with that shape."""
        for spec, src in self.files():
            for value in _walk(Value(src, "", src.data, spec.top, 1)):
                place = _place(value)
                if place is not None:
                    yield place

    def line(self, src: SourceFile, *path: Any) -> int:
        """The line of the value at `path` in a file (keys and list indexes), or of its nearest parent."""
        data, line = src.data, 1
        for key in path:
            line = line_of(data, key, line)
            if isinstance(data, dict):
                data = data.get(key)
            elif isinstance(data, list) and isinstance(key, int) and 0 <= key < len(data):
                data = data[key]
            else:
                break
        return line


def _place(value: Value) -> Place | None:
    kind = value.type
    if isinstance(kind, OneOf) and isinstance(value.value, dict):
        return Place(value.src, value.where, value.value, kind.shape_for(value.value), value.line)
    if isinstance(kind, Shape):
        data = kind.as_mapping(value.value)
        if data is not None:
            return Place(value.src, value.where, data, kind, value.line)
    return None


def _walk(value: Value) -> Iterator[Value]:
    yield value
    kind = value.type
    if not kind.accepts(value.value) or (value.key is not None and not value.key.accepts(value.raw_key)):
        return
    place = _place(value)
    if place is not None:
        for f in place.shape.fields:
            raw = place.data.get(f.name)
            if raw is not None:
                yield from _walk(
                    Value(value.src, join(value.where, f.name), raw, f.type, place.line_of(f.name), f)
                )
    elif isinstance(kind, ListOf):
        for index, item in enumerate(value.value):
            line = line_of(value.value, index, value.line)
            yield from _walk(Value(value.src, join(value.where, f"[{index}]"), item, kind.item, line))
    elif isinstance(kind, MapOf):
        for key, item in value.value.items():
            line = line_of(value.value, key, value.line)
            where = join(value.where, kind.key.text(key))
            yield from _walk(Value(value.src, where, item, kind.value, line, key=kind.key, raw_key=key))
