"""Fixtures for the docs tests: built sites (real knowledge and a small fixture KB) and a real
headless Chromium driven by Playwright.

Chromium is Debian's `/usr/bin/chromium` (`apt-get install -y chromium`); Playwright's own browser
download is never used. Without Chromium the browser tests fail with the install command, they
do not skip: the site's search and diagram are only tested there.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, SITE_KB
from triage.core.model import KnowledgeBase
from triage.kb.loader import load_kb
from triage.site.builder import build

FIXTURE_KB = SITE_KB
KNOWLEDGE = REPO / "knowledge"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture(scope="session")
def real_kb() -> KnowledgeBase:
    return load_kb(KNOWLEDGE)


@pytest.fixture(scope="session")
def small_kb() -> KnowledgeBase:
    return load_kb(FIXTURE_KB, use_compiled=False)


@pytest.fixture(scope="session")
def real_site(real_kb: KnowledgeBase, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site") / "html"
    build(real_kb, out, "html")
    return out


@pytest.fixture(scope="session")
def real_markdown(real_kb: KnowledgeBase, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site") / "triage"
    build(real_kb, out, "markdown")
    return out


@pytest.fixture(scope="package")
def browser() -> Iterator[Any]:
    """One headless Chromium for the docs tests. Package-scoped: Playwright's sync API runs an
    event loop while it is open, which must be gone before other packages (the app's Pilot tests)
    start their own."""
    if not CHROMIUM.exists():
        pytest.fail("headless Chromium is missing: apt-get update && apt-get install -y chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@dataclass
class Tab:
    """A browser page that records everything that went wrong while it was used."""

    page: Any
    problems: list[str] = field(default_factory=list)

    def goto(self, path: Path, query: str = "") -> None:
        self.page.goto(path.resolve().as_uri() + query)


@pytest.fixture
def open_tab(browser: Any) -> Iterator[Callable[..., Tab]]:
    contexts: list[Any] = []

    def open_(width: int = 1200, height: int = 900, color_scheme: str = "light") -> Tab:
        context = browser.new_context(viewport={"width": width, "height": height}, color_scheme=color_scheme)
        contexts.append(context)
        tab = Tab(context.new_page())
        tab.page.on(
            "console",
            lambda m: (
                tab.problems.append(f"console {m.type}: {m.text}") if m.type in ("error", "warning") else None
            ),
        )
        tab.page.on("pageerror", lambda e: tab.problems.append(f"page error: {e}"))
        tab.page.on("requestfailed", lambda r: tab.problems.append(f"request failed: {r.url}"))
        tab.page.on("dialog", lambda d: (tab.problems.append(f"dialog: {d.message}"), d.dismiss()))
        return tab

    yield open_
    for context in contexts:
        context.close()


def copy_kb(target: Path) -> Path:
    """A writable copy of the fixture knowledge base."""
    shutil.copytree(FIXTURE_KB, target)
    return target


def mkdocs_build(project: Path, config: str, *options: str) -> str:
    """`mkdocs build` in `project` with `config` as its mkdocs.yml; it must succeed. Its stderr."""
    (project / "mkdocs.yml").write_text(config, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", *options],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stderr
