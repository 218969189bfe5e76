"""Fixtures for the probe tests."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator

import pytest

from tests.probes.helpers import marked_pids


@pytest.fixture
def marker() -> Iterator[str]:
    """A unique tag for the processes a test starts; any still alive at teardown are killed (the test
    that leaked them fails on its own assertion first)."""
    tag = uuid.uuid4().hex
    yield tag
    for pid in marked_pids(tag):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)
