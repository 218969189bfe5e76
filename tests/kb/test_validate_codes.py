"""Every validation rule has a failing fixture that triggers that rule and no other."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import FAILING_KB, MINIMAL_KB, CliResult, overlay_kb
from triage.kb.rules import CODES, RULES
from triage.kb.sources import read_sources
from triage.kb.validate import check

RULE_NAMES = {r.name for r in RULES}
# tests/fixtures/kb/failing/<rule> and, for more cases of one rule, <rule>.<case>.
FIXTURES = sorted(p.name for p in FAILING_KB.iterdir())


def test_minimal_fixture_is_valid() -> None:
    kb, diagnostics = check(read_sources(MINIMAL_KB), outputs=True)
    assert diagnostics == []
    assert kb is not None and set(kb.entries) == {"D1", "D2"}


def test_every_rule_has_a_failing_fixture() -> None:
    assert {name.split(".")[0] for name in FIXTURES} == RULE_NAMES
    assert set(FIXTURES) >= RULE_NAMES


def test_every_code_has_a_rule() -> None:
    assert {r.code for r in RULES} == set(CODES)


def test_every_rule_says_what_why_and_how() -> None:
    for rule in RULES:
        assert rule.finds and rule.why and rule.fix, rule.name


@pytest.mark.parametrize("fixture", FIXTURES)
def test_fixture_triggers_only_its_rule(fixture: str, tmp_path: Path) -> None:
    rule = next(r for r in RULES if r.name == fixture.split(".")[0])
    root = overlay_kb(tmp_path / "knowledge", FAILING_KB / fixture)
    kb, diagnostics = check(read_sources(root), outputs=True)
    assert (kb is None) == (rule.stage == "sources")
    assert diagnostics, f"{fixture}: nothing found"
    assert {(d.rule, d.code) for d in diagnostics} == {(rule.name, rule.code)}, [
        d.format() for d in diagnostics
    ]
    for diagnostic in diagnostics:
        text = diagnostic.format()
        assert diagnostic.file and "Fix: " in text, text


def test_stale_compiled_knowledge_is_reported(tmp_path: Path, run_cli: Callable[..., CliResult]) -> None:
    root = overlay_kb(tmp_path / "knowledge", FAILING_KB / "compiled-current")
    result = run_cli("--kb", str(root), "kb", "check")
    assert result.returncode == 2
    assert b"KB016" in result.stderr and b"triage kb build" in result.stderr
    assert run_cli("--kb", str(root), "kb", "build").returncode == 0
    assert run_cli("--kb", str(root), "kb", "check").returncode == 0


def test_errors_name_file_and_line(tmp_path: Path) -> None:
    root = overlay_kb(tmp_path / "knowledge", FAILING_KB / "regex-compiles")
    _, diagnostics = check(read_sources(root))
    (diag,) = diagnostics
    assert diag.file.endswith("entries/D01-port.yaml")
    source_lines = (root / "entries" / "D01-port.yaml").read_text().splitlines()
    assert "errno (98" in source_lines[diag.line - 1]
    assert diag.field == "signatures[0].pattern"


def test_graph_errors_point_at_the_target_line(tmp_path: Path) -> None:
    root = overlay_kb(tmp_path / "knowledge", FAILING_KB / "target-resolves")
    (diag,) = check(read_sources(root))[1]
    assert "missing_node" in (root / "graph.yaml").read_text().splitlines()[diag.line - 1]


def test_yaml_syntax_error_names_the_line(tmp_path: Path, run_cli: Callable[..., CliResult]) -> None:
    root = overlay_kb(tmp_path / "knowledge", FAILING_KB / "file-parses")
    result = run_cli("--kb", str(root), "ask", "address already in use")
    assert result.returncode == 2
    err = result.stderr.decode()
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "D03-broken.yaml:3" in err and "KB000" in err


def test_codes_command_lists_every_rule(run_cli: Callable[..., CliResult]) -> None:
    out = run_cli("kb", "codes").stdout.decode()
    for rule in RULES:
        assert rule.code in out and rule.name in out and rule.fix in out
