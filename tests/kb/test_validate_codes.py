"""Every validation code has a failing fixture that triggers that code and no other."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import FAILING_KB, MINIMAL_KB, CliResult, overlay_kb
from triage.kb.sources import read_sources
from triage.kb.validate import CODES, check

CHECK_ONLY_CODES = {"KB016"}  # found by `triage kb check`, not by validating the sources


def test_minimal_fixture_is_valid() -> None:
    kb, diagnostics = check(read_sources(MINIMAL_KB))
    assert diagnostics == []
    assert kb is not None and set(kb.entries) == {"D1", "D2"}


def test_every_code_has_a_failing_fixture() -> None:
    assert {p.name for p in FAILING_KB.iterdir()} == set(CODES)


@pytest.mark.parametrize("code", sorted(set(CODES) - CHECK_ONLY_CODES))
def test_fixture_triggers_only_its_code(code: str, tmp_path: Path) -> None:
    root = overlay_kb(tmp_path / "knowledge", FAILING_KB / code)
    kb, diagnostics = check(read_sources(root))
    assert kb is None
    assert {d.code for d in diagnostics} == {code}, [d.format() for d in diagnostics]
    for diagnostic in diagnostics:
        text = diagnostic.format()
        assert diagnostic.file and "Fix: " in text, text


def test_stale_compiled_knowledge_is_reported(tmp_path: Path, run_cli: Callable[..., CliResult]) -> None:
    root = overlay_kb(tmp_path / "knowledge", FAILING_KB / "KB016")
    result = run_cli("--kb", str(root), "kb", "check")
    assert result.returncode == 2
    assert b"KB016" in result.stderr and b"triage kb build" in result.stderr
    assert run_cli("--kb", str(root), "kb", "build").returncode == 0
    assert run_cli("--kb", str(root), "kb", "check").returncode == 0


def test_errors_name_file_and_line(tmp_path: Path) -> None:
    root = overlay_kb(tmp_path / "knowledge", FAILING_KB / "KB005")
    _, diagnostics = check(read_sources(root))
    (diag,) = diagnostics
    assert diag.file.endswith("entries/D01-port.yaml")
    source_lines = (root / "entries" / "D01-port.yaml").read_text().splitlines()
    assert "errno (98" in source_lines[diag.line - 1]
    assert diag.field == "signatures[0].pattern"


def test_yaml_syntax_error_names_the_line(tmp_path: Path, run_cli: Callable[..., CliResult]) -> None:
    root = overlay_kb(tmp_path / "knowledge", FAILING_KB / "KB000")
    result = run_cli("--kb", str(root), "ask", "address already in use")
    assert result.returncode == 2
    err = result.stderr.decode()
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "D03-broken.yaml:3" in err and "KB000" in err


def test_codes_command_lists_the_table(run_cli: Callable[..., CliResult]) -> None:
    out = run_cli("kb", "codes").stdout.decode()
    for code in CODES:
        assert code in out
