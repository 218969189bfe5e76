"""The input checks both engines make: line counting and the over-long line, across chunk cuts."""

from __future__ import annotations

import itertools
import random

import pytest

from triage.core.errors import UserError
from triage.core.logscan.reading import LineCheck, blocks, ere


def _random_text(rng: random.Random, longest: int) -> bytes:
    lengths = [rng.choice((0, 1, 5, 80, 200, longest)) for _ in range(rng.randint(1, 40))]
    text = b"\n".join(bytes([rng.choice(b"abc \r")]) * n for n in lengths)
    return text + (b"\n" if rng.random() < 0.5 else b"")


def _check(text: bytes, max_line: int, cuts: list[int]) -> int | None:
    """Lines counted by LineCheck fed `text` cut at `cuts`, or None when it refused a line."""
    check = LineCheck("t.log", max_line)
    edges = [0, *cuts, len(text)]
    try:
        for start, end in itertools.pairwise(edges):
            check.feed(text[start:end])
    except UserError as exc:
        assert "longer than" in str(exc)
        return None
    return check.lines


@pytest.mark.parametrize("seed", range(40))
def test_line_check_counts_and_refuses_exactly(seed: int) -> None:
    rng = random.Random(seed)
    max_line = 1024
    text = _random_text(rng, rng.choice((1023, 1024, 1025, 3000)))
    truth_lines = text.count(b"\n") + (0 if text.endswith(b"\n") else 1)
    refused = max(len(line) for line in text.split(b"\n")) > max_line
    for _ in range(5):
        cuts, position = [], 0
        while True:
            position += rng.randint(1, max_line)
            if position >= len(text):
                break
            cuts.append(position)
        assert _check(text, max_line, cuts) == (None if refused else truth_lines)


def test_python_engine_blocks_refuse_the_same_line() -> None:
    import io

    ok = b"x" * 1024 + b"\n" + b"y" * 1024
    assert b"".join(blocks("t.log", io.BytesIO(ok), 1024)) == ok
    with pytest.raises(UserError, match="longer than 1,024 bytes"):
        list(blocks("t.log", io.BytesIO(ok + b"y"), 1024))
    assert _check(ok + b"y", 1024, [1000, 2000]) is None
    assert _check(ok, 1024, [1000, 2000]) == 2


def test_anchor_as_extended_regex() -> None:
    assert ere("error\n") == "error$"
    assert ere("failed (exitcode: -9)") == r"failed \(exitcode: -9\)"
    assert ere("a.b*c") == r"a\.b\*c"
