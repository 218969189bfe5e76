"""`triage docs build` as a user runs it: what it writes, rebuilding, and bad input."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from tests.conftest import CliResult
from tests.site.conftest import FIXTURE_KB, copy_kb
from triage.core.lint import RULES
from triage.kb.loader import load_kb
from triage.site.builder import MANIFEST, build

Run = Callable[..., CliResult]
SMALL_IDS = ["D9", "D22", "D19", "D21", "P7", "X3"]


def one_error_line(result: CliResult) -> str:
    err = result.stderr.decode()
    assert result.returncode == 2, err
    assert "Traceback" not in err and err.count("\n") == 1, err
    return err


def test_cli_builds_the_html_site(run_cli: Run, tmp_path: Path) -> None:
    out = tmp_path / "site"
    result = run_cli("--kb", str(FIXTURE_KB), "docs", "build", "--out", str(out))
    assert result.returncode == 0, result.stderr
    lint_pages = 1 + len(RULES)  # lint.html and a page per rule, whatever the knowledge
    assert f"wrote {8 + lint_pages} pages" in result.stdout.decode()
    names = {p.name for p in out.iterdir()}
    assert {f"{i}.html" for i in SMALL_IDS} <= names
    assert {
        "index.html",
        "graph.html",
        "graph.svg",
        "style.css",
        "search.js",
        "search-index.js",
        MANIFEST,
    } <= names
    index = (out / "index.html").read_text(encoding="utf-8")
    # Nothing is fetched from anywhere else: no absolute URL in a src or a stylesheet link.
    assert (
        'src="http' not in index
        and 'href="//' not in index
        and "@import" not in (out / "style.css").read_text()
    )


def test_cli_builds_markdown_with_nav_snippets(run_cli: Run, tmp_path: Path) -> None:
    out = tmp_path / "docs" / "triage"
    result = run_cli("--kb", str(FIXTURE_KB), "docs", "build", "--format", "markdown", "--out", str(out))
    assert result.returncode == 0, result.stderr
    names = {p.name for p in out.iterdir()}
    assert {f"{i}.md" for i in SMALL_IDS} | {"index.md", "graph.md", "graph.svg"} <= names
    assert "mkdocs-nav.yml" in result.stdout.decode()
    d9 = (out / "D9.md").read_text(encoding="utf-8")
    assert (
        d9.startswith("# D9: ")
        and "[D22: " in d9
        and "](D22.md)" in d9
        and "](graph.md#loader_question)" in d9
    )
    assert '"triage/D9.md"' in (out / "mkdocs-nav.yml").read_text(encoding="utf-8")


def test_rebuild_replaces_its_own_output_and_drops_removed_entries(tmp_path: Path) -> None:
    kb_dir = copy_kb(tmp_path / "kb")
    out = tmp_path / "site"
    build(load_kb(kb_dir, use_compiled=False), out)
    assert (out / "X3.html").is_file()
    (kb_dir / "entries" / "X03-vanished-process.yaml").unlink()
    graph = (kb_dir / "graph.yaml").read_text(encoding="utf-8")
    graph = graph.replace(
        "      - label: One process vanished with nothing in the log\n        target: X3\n", ""
    )
    (kb_dir / "graph.yaml").write_text(graph, encoding="utf-8")
    build(load_kb(kb_dir, use_compiled=False), out)
    assert not (out / "X3.html").exists()
    assert "X3" not in (out / "index.html").read_text(encoding="utf-8")
    assert "X3.html" not in json.loads((out / MANIFEST).read_text())["files"]


def test_build_is_deterministic(tmp_path: Path) -> None:
    kb = load_kb(FIXTURE_KB, use_compiled=False)
    first = build(kb, tmp_path / "a")
    build(kb, tmp_path / "b")
    for name in first.files:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_refuses_a_directory_it_did_not_write(run_cli: Run, tmp_path: Path) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    err = one_error_line(run_cli("--kb", str(FIXTURE_KB), "docs", "build", "--out", str(out)))
    assert "not empty" in err and str(out) in err
    assert (out / "notes.txt").read_text() == "keep me"


def test_refuses_a_stranger_added_to_a_previous_build(run_cli: Run, tmp_path: Path) -> None:
    out = tmp_path / "site"
    assert run_cli("--kb", str(FIXTURE_KB), "docs", "build", "--out", str(out)).returncode == 0
    (out / "extra.html").write_text("mine")
    err = one_error_line(run_cli("--kb", str(FIXTURE_KB), "docs", "build", "--out", str(out)))
    assert "extra.html" in err
    assert (out / "extra.html").exists() and (out / "index.html").exists()


def test_out_is_a_file(run_cli: Run, tmp_path: Path) -> None:
    target = tmp_path / "file.html"
    target.write_text("x")
    err = one_error_line(run_cli("--kb", str(FIXTURE_KB), "docs", "build", "--out", str(target)))
    assert "is a file" in err


def test_invalid_knowledge_is_one_line(run_cli: Run, tmp_path: Path) -> None:
    kb_dir = copy_kb(tmp_path / "kb")
    (kb_dir / "graph.yaml").write_bytes(b"start: [\n\xff\xfe")
    err = one_error_line(run_cli("--kb", str(kb_dir), "docs", "build", "--out", str(tmp_path / "site")))
    assert "graph.yaml" in err
    assert not (tmp_path / "site").exists()


def test_tampered_manifest_cannot_delete_outside_the_directory(tmp_path: Path) -> None:
    kb = load_kb(FIXTURE_KB, use_compiled=False)
    out = tmp_path / "site"
    build(kb, out)
    precious = tmp_path / "precious.txt"
    precious.write_text("keep")
    manifest = json.loads((out / MANIFEST).read_text())
    manifest["files"].append("../precious.txt")
    (out / MANIFEST).write_text(json.dumps(manifest))
    build(kb, out)
    assert precious.read_text() == "keep"
