"""`NamedTuple` for the modules `triage ask` imports, without importing `typing`.

Importing `typing` costs more than the rest of an `ask` run's imports together (about as much as
starting Python), and `typing.NamedTuple` and `collections.namedtuple` compile code for every
class. The class below builds an equivalent tuple subclass from the annotations (fields, defaults,
`_make`, `_replace`, `_asdict`, `_fields`, a repr) with shared, ready-made functions, and copies the
class body's methods, properties and docstring onto it, as `typing.NamedTuple` does. Type checkers
see `typing.NamedTuple` itself:

    TYPE_CHECKING = False  # mypy reads the name as true; importing it from typing would cost the import
    if TYPE_CHECKING:
        from typing import NamedTuple
    else:
        from triage.core.records import NamedTuple

Like with `typing.NamedTuple`, methods cannot use `super()` and fields with defaults come last.
"""

from __future__ import annotations

from collections.abc import Iterable
from operator import itemgetter

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_NOT_COPIED = frozenset({"__module__", "__qualname__", "__annotations__", "__orig_bases__", "__dict__"})
_MISSING = object()


def _new(cls: Any, *args: object, **kwargs: object) -> Any:
    fields: tuple[str, ...] = cls._fields
    if not kwargs and len(args) == len(fields):
        return tuple.__new__(cls, args)
    if len(args) > len(fields):
        raise TypeError(f"{cls.__name__}() takes {len(fields)} arguments but {len(args)} were given")
    values = list(args)
    defaults: dict[str, object] = cls._field_defaults
    for name in fields[len(args) :]:
        value = kwargs.pop(name, _MISSING)
        if value is _MISSING:
            value = defaults.get(name, _MISSING)
            if value is _MISSING:
                raise TypeError(f"{cls.__name__}() missing required argument: {name!r}")
        values.append(value)
    if kwargs:
        raise TypeError(f"{cls.__name__}() got unexpected or repeated arguments: {', '.join(kwargs)}")
    return tuple.__new__(cls, values)


def _make(cls: Any, iterable: Iterable[object]) -> Any:
    values = tuple(iterable)
    if len(values) != len(cls._fields):
        raise TypeError(f"expected {len(cls._fields)} arguments, got {len(values)}")
    return tuple.__new__(cls, values)


def _replace(self: Any, **changes: object) -> Any:
    fields: tuple[str, ...] = self._fields
    values = [changes.pop(name, value) for name, value in zip(fields, self, strict=True)]
    if changes:
        raise TypeError(f"got unexpected field names: {', '.join(changes)}")
    return tuple.__new__(type(self), values)


def _asdict(self: Any) -> dict[str, object]:
    return dict(zip(self._fields, self, strict=True))


def _repr(self: Any) -> str:
    body = ", ".join(f"{name}={value!r}" for name, value in zip(self._fields, self, strict=True))
    return f"{type(self).__name__}({body})"


def _getnewargs(self: Any) -> tuple[object, ...]:
    return tuple(self)


class _RecordMeta(type):
    def __new__(mcs, name: str, bases: tuple[type, ...], namespace: dict[str, object]) -> type:
        if not bases:  # NamedTuple itself
            return super().__new__(mcs, name, bases, namespace)
        annotations = namespace.get("__annotations__", {})
        assert isinstance(annotations, dict)
        fields = tuple(annotations)
        defaults = {f: namespace[f] for f in fields if f in namespace}
        body: dict[str, object] = {
            "__slots__": (),
            "_fields": fields,
            "_field_defaults": defaults,
            "__match_args__": fields,
            "__new__": _new,
            "_make": classmethod(_make),
            "_replace": _replace,
            "_asdict": _asdict,
            "__repr__": _repr,
            "__getnewargs__": _getnewargs,
            "__module__": namespace.get("__module__"),
            "__qualname__": namespace.get("__qualname__", name),
            "__annotations__": annotations,
        }
        body |= {
            field: property(itemgetter(i), doc=f"Alias for field number {i}")
            for i, field in enumerate(fields)
        }
        body |= {k: v for k, v in namespace.items() if k not in _NOT_COPIED and k not in fields}
        return type(name, (tuple,), body)


class NamedTuple(metaclass=_RecordMeta):
    """Base class: `class Point(NamedTuple): x: int; y: int = 0` makes a named tuple."""
