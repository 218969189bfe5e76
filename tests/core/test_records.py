"""The light NamedTuple (triage/core/records.py) behaves as typing.NamedTuple does."""

from __future__ import annotations

import pickle
import typing

import pytest

from triage.core import records


def make(base: type) -> type:
    class Point(base):  # type: ignore[valid-type,misc]
        """A point."""

        x: int
        y: int = 0
        tags: tuple[str, ...] = ()

        @property
        def total(self) -> int:
            return self.x + self.y  # type: ignore[no-any-return]

        def scaled(self, k: int) -> Point:
            return self._replace(x=self.x * k, y=self.y * k)  # type: ignore[no-any-return]

    return Point


LIGHT, TYPED = make(records.NamedTuple), make(typing.NamedTuple)


@pytest.mark.parametrize("cls", [LIGHT, TYPED])
def test_same_behaviour_as_typing_namedtuple(cls: type) -> None:
    p = cls(1, 2)
    assert p == (1, 2, ()) and p.x == 1 and p.y == 2 and p[0] == 1
    assert cls(3) == (3, 0, ()) and cls(x=4, tags=("a",)) == (4, 0, ("a",))
    assert p._replace(y=5) == (1, 5, ()) and type(p._replace(y=5)) is cls
    assert p._asdict() == {"x": 1, "y": 2, "tags": ()}
    assert cls._fields == ("x", "y", "tags") and cls._make([7, 8, ("b",)]) == (7, 8, ("b",))
    assert repr(p) == "Point(x=1, y=2, tags=())"
    assert p.total == 3 and p.scaled(2) == (2, 4, ()) and cls.__doc__ == "A point."
    assert hash(p) == hash((1, 2, ()))
    with pytest.raises(TypeError):
        cls()
    with pytest.raises(TypeError):
        cls(1, z=2)
    with pytest.raises(AttributeError):
        p.x = 9  # type: ignore[misc]


def test_light_records_pickle_and_keep_no_dict() -> None:
    assert pickle.loads(pickle.dumps(ENTRY)) == ENTRY
    assert not hasattr(ENTRY, "__dict__")


class Pickled(records.NamedTuple):  # at module level, where pickle finds it
    name: str
    values: tuple[int, ...] = ()


ENTRY = Pickled("a", (1, 2))
