"""Shared fixtures: the real knowledge base, fixture knowledge dirs, and running the real CLI."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path

import pytest

from triage.core.facts import Evidence, ProbeResult, Status
from triage.core.model import KnowledgeBase
from triage.kb.loader import load_kb

REPO = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
MINIMAL_KB = FIXTURES / "kb" / "minimal"
FAILING_KB = FIXTURES / "kb" / "failing"
WALK_KB = FIXTURES / "kb" / "walk"  # a small graph with every node type, for walks and the TUI
SITE_KB = (
    FIXTURES / "kb" / "site"
)  # entries whose Markdown exercises the docs site (see fixtures/kb/README.md)

# Tests that use these fixtures open a headless Chromium: `slow` whatever their module says, so
# `make test-fast` never starts a browser.
BROWSER_FIXTURES = frozenset({"browser", "open_tab"})


@pytest.hookimpl(tryfirst=True)  # before `-m "not slow"` deselects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if BROWSER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def kb() -> KnowledgeBase:
    return load_kb(REPO / "knowledge")


def overlay_kb(target: Path, overlay: Path | None = None) -> Path:
    """Copy the minimal fixture KB to `target`, then apply an overlay (files replace, DELETE removes)."""
    shutil.copytree(MINIMAL_KB, target)
    if overlay is not None:
        for path in overlay.rglob("*"):
            if path.is_dir():
                continue
            rel = path.relative_to(overlay)
            if rel.name == "DELETE":
                for line in path.read_text().split():
                    (target / line).unlink()
                continue
            dest = target / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, dest)
    return target


CliResult = subprocess.CompletedProcess[bytes]


@pytest.fixture
def run_cli() -> Callable[..., CliResult]:
    """Run the real `python -m triage` in a subprocess, as a user would."""

    def run(
        *args: str,
        stdin: bytes | None = None,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        timeout: float = 60,
    ) -> CliResult:
        full_env = {k: v for k, v in os.environ.items() if k not in ("TRIAGE_KNOWLEDGE", "NO_COLOR")}
        full_env["PYTHONPATH"] = str(REPO) + os.pathsep + full_env.get("PYTHONPATH", "")
        full_env.update(env or {})
        return subprocess.run(
            [sys.executable, "-m", "triage", *args],
            input=stdin,
            capture_output=True,
            env=full_env,
            cwd=cwd or REPO,
            timeout=timeout,
            check=False,
        )

    return run


def result(
    name: str,
    status: Status = "ok",
    facts: Mapping[str, object] | None = None,
    summary: str = "",
    evidence: Iterable[tuple[str, str]] = (),
    duration_s: float = 0.2,
) -> ProbeResult:
    return ProbeResult(
        name, status, dict(facts or {}), tuple(Evidence(s, o) for s, o in evidence), duration_s, summary
    )


@pytest.fixture(scope="session")
def fixture_kb() -> KnowledgeBase:
    return load_kb(WALK_KB, use_compiled=False)


@pytest.fixture(autouse=True)
def _environment_restored() -> Iterator[None]:
    """`main` run inside the test process sets NO_COLOR or TRIAGE_KNOWLEDGE, as the one-shot command
    does for its own modules; the next tests of the same worker must not inherit them (the Textual
    snapshots drew without colour after a `--no-color` run)."""
    saved = dict(os.environ)
    yield
    if dict(os.environ) != saved:
        os.environ.clear()
        os.environ.update(saved)
