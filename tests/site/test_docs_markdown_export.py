"""`--format markdown` drops into an MkDocs site: `mkdocs build --strict` with link and anchor
validation turned up to warnings passes, using the generated nav snippet as it is."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from tests.site.conftest import mkdocs_build
from triage.core.lint import RULES
from triage.core.model import KnowledgeBase

MKDOCS_YML = """\
site_name: Team docs
docs_dir: docs
validation:
  omitted_files: warn
  absolute_links: warn
  unrecognized_links: warn
  anchors: warn
  not_found: warn
nav:
- Home: index.md
"""


@pytest.mark.slow  # runs a full mkdocs build
def test_mkdocs_strict_build_of_the_export(
    real_markdown: Path, real_kb: KnowledgeBase, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    (project / "docs").mkdir(parents=True)
    (project / "docs" / "index.md").write_text("# Team docs\n\nSee [triage](triage/index.md).\n")
    shutil.copytree(real_markdown, project / "docs" / "triage")
    snippet = (real_markdown / "mkdocs-nav.yml").read_text(encoding="utf-8")
    stderr = mkdocs_build(project, MKDOCS_YML + snippet, "--strict")
    assert "WARNING" not in stderr, stderr

    site = project / "site" / "triage"
    for entry in real_kb.entries:
        page = (site / entry / "index.html").read_text(encoding="utf-8")
        assert 'id="fix"' in page and 'id="root-cause"' in page, entry
    graph = (site / "graph" / "index.html").read_text(encoding="utf-8")
    assert f'id="{real_kb.graph.start}"' in graph and 'src="../graph.svg"' in graph
    assert (site / "graph.svg").read_text(encoding="utf-8").startswith("<svg")


def test_nav_snippets_list_every_page(real_markdown: Path, real_kb: KnowledgeBase) -> None:
    nav = yaml.safe_load((real_markdown / "mkdocs-nav.yml").read_text(encoding="utf-8"))
    paths: list[str] = []

    def walk(items: list[object]) -> None:
        for item in items:
            if isinstance(item, str):
                paths.append(item)
            elif isinstance(item, dict):
                for value in item.values():
                    if isinstance(value, list):
                        walk(value)
                    else:
                        paths.append(str(value))

    walk(nav)
    expected = {"triage/index.md", "triage/graph.md"} | {f"triage/{e}.md" for e in real_kb.entries}
    expected |= {"triage/lint.md"} | {f"triage/{code}.md" for code in RULES}
    assert sorted(paths) == sorted(expected)
    toctree = (real_markdown / "sphinx-toctree.txt").read_text(encoding="utf-8")
    assert toctree.startswith("```{toctree}")
    listed = [line for line in toctree.splitlines() if line.startswith("triage/")]
    entries = [f"triage/{e}" for e in real_kb.entries]
    assert listed == [
        "triage/index",
        "triage/graph",
        *entries,
        "triage/lint",
        *(f"triage/{c}" for c in RULES),
    ]


def test_nav_prefix_is_configurable(real_kb: KnowledgeBase, tmp_path: Path) -> None:
    from triage.site.builder import build

    build(real_kb, tmp_path / "out", "markdown", nav_prefix="/reference/triage/")
    snippet = (tmp_path / "out" / "mkdocs-nav.yml").read_text(encoding="utf-8")
    assert '"reference/triage/D9.md"' in snippet and '"triage/D9.md"' not in snippet
