"""YAML loading that remembers line numbers, so validation errors can name file and line.

Only the knowledge loader uses this; it imports PyYAML, which the fast `ask` path avoids.
"""

from __future__ import annotations

from typing import Any

import yaml


class LineDict(dict[Any, Any]):
    """A mapping that knows the line of each key (1-based) and of itself."""

    line: int = 0
    lines: dict[Any, int]
    duplicates: list[tuple[Any, int]]


class LineList(list[Any]):
    """A sequence that knows the line of each item (1-based) and of itself."""

    line: int = 0
    lines: list[int]


class _Loader(yaml.SafeLoader):
    def compose_node(self, parent: Any, index: Any) -> Any:
        # An alias shares a node; a few nested ones ("billion laughs") make a document whose
        # walk is exponential in its size. Knowledge files have no use for them.
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise yaml.composer.ComposerError(
                None,
                None,
                "aliases (*name) are not allowed in knowledge files; write the value out",
                event.start_mark,
            )
        return super().compose_node(parent, index)


def _construct_mapping(loader: _Loader, node: yaml.MappingNode) -> LineDict:
    loader.flatten_mapping(node)
    result = LineDict()
    result.line = node.start_mark.line + 1
    result.lines = {}
    result.duplicates = []
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            hash(key)
        except TypeError:  # `[a, b]: value` or `{a: b}: value`: no knowledge file has such keys
            raise yaml.constructor.ConstructorError(
                None, None, "a key must be a plain value, not a list or a mapping", key_node.start_mark
            ) from None
        if key in result:
            result.duplicates.append((key, key_node.start_mark.line + 1))
        result[key] = loader.construct_object(value_node, deep=True)
        result.lines[key] = key_node.start_mark.line + 1
    return result


def _construct_sequence(loader: _Loader, node: yaml.SequenceNode) -> LineList:
    result = LineList(loader.construct_object(child, deep=True) for child in node.value)
    result.line = node.start_mark.line + 1
    result.lines = [child.start_mark.line + 1 for child in node.value]
    return result


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_sequence)


class YamlSyntaxError(Exception):
    """The text is not valid YAML; `line` is 1-based (0 when unknown)."""

    def __init__(self, message: str, line: int) -> None:
        super().__init__(message)
        self.line = line


def parse(text: str) -> Any:
    """Parse one YAML document, raising YamlSyntaxError with a line number."""
    try:
        return yaml.load(text, Loader=_Loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 0
        problem = exc.problem or exc.context or "invalid YAML"
        raise YamlSyntaxError(problem, line) from exc
    except yaml.YAMLError as exc:
        raise YamlSyntaxError(str(exc).splitlines()[0], 0) from exc
    except RecursionError:
        raise YamlSyntaxError("nested too deeply", 0) from None


def line_of(container: Any, key: Any, default: int = 0) -> int:
    """The line of `key` inside a LineDict/LineList, or `default`."""
    if isinstance(container, LineDict):
        return container.lines.get(key, container.line or default)
    if isinstance(container, LineList) and isinstance(key, int) and 0 <= key < len(container.lines):
        return container.lines[key]
    return default
