"""The `ask`, `show`, `list` and `kb` commands as a user runs them, including bad input."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from tests.conftest import MINIMAL_KB, CliResult

Run = Callable[..., CliResult]


def one_error_line(result: CliResult) -> str:
    assert result.returncode == 2, result
    err = result.stderr.decode()
    assert "Traceback" not in err
    assert err.count("\n") == 1, err
    assert err.startswith("triage: error: ")
    return err


def test_ask_prints_best_entry_fix_and_verification(run_cli: Run) -> None:
    result = run_cli("--kb", str(MINIMAL_KB), "ask", "training freezes on the last batch of the epoch")
    out = result.stdout.decode()
    assert result.returncode == 0
    lines = out.split("\n")
    assert lines[0].startswith("Best match (") and ": D2 " in lines[0]
    assert "RE-CHECK YOUR EXPERIMENT" in lines[1]
    assert "Fix" in out and "DistributedSampler" in out
    assert "RE-CHECK YOUR EXPERIMENT" in out
    assert "Also possible" in out and "D1" in out


def test_ask_words_without_quotes_and_json(run_cli: Run) -> None:
    result = run_cli("--kb", str(MINIMAL_KB), "ask", "--json", "errno", "98", "on", "start")
    data = json.loads(result.stdout)
    assert data["verdict"] == "match" and data["best"]["id"] == "D1"
    assert data["hits"][0]["score"] >= data["hits"][1]["score"]
    assert any("errno" in r for r in data["hits"][0]["reasons"])


def test_ask_reads_a_paste_from_stdin(run_cli: Run) -> None:
    paste = b"[W socket.cpp:436] [c10d] The server socket has failed to bind (errno: 98 - Address already in use).\n"
    result = run_cli("--kb", str(MINIMAL_KB), "ask", "--json", "-", stdin=paste)
    assert json.loads(result.stdout)["best"]["id"] == "D1"


def test_ask_nothing_matches_says_so(run_cli: Run) -> None:
    result = run_cli("--kb", str(MINIMAL_KB), "ask", "how do I bake sourdough bread")
    assert result.returncode == 1
    assert "Nothing in this text points to a failure triage knows" in result.stdout.decode()
    vague = run_cli("--kb", str(MINIMAL_KB), "ask", "my training job hangs somewhere")
    assert vague.returncode == 1 and "No entry matches this well" in vague.stdout.decode()


def test_plain_output_when_piped_and_styled_never_leaks(run_cli: Run) -> None:
    result = run_cli("--kb", str(MINIMAL_KB), "show", "D1")
    assert b"\x1b[" not in result.stdout


def test_bad_input_is_one_line_and_exit_2(run_cli: Run, tmp_path: Path) -> None:
    kb = ("--kb", str(MINIMAL_KB))
    assert "empty query" in one_error_line(run_cli(*kb, "ask", "   "))
    assert "empty query" in one_error_line(run_cli(*kb, "ask", "-", stdin=b""))
    assert "larger than 1 MB" in one_error_line(run_cli(*kb, "ask", "-", stdin=b"x" * 10_000_000))
    assert "not UTF-8" in one_error_line(run_cli(*kb, "ask", "-", stdin=b"hang \xff\xfe at end"))
    assert "unknown entry id 'D99'" in one_error_line(run_cli(*kb, "show", "D99"))
    assert "knowledge directory not found" in one_error_line(run_cli("--kb", str(tmp_path / "nope"), "list"))
    assert "unknown section" in one_error_line(run_cli(*kb, "list", "--section", "nope"))


def test_show_accepts_forgiving_ids_and_json(run_cli: Run) -> None:
    for raw in ("D1", "d01", "d1"):
        data = json.loads(run_cli("--kb", str(MINIMAL_KB), "show", "--json", raw).stdout)
        assert data["id"] == "D1" and data["verify"]["needed"] is False


def test_list_groups_by_section(run_cli: Run) -> None:
    out = run_cli("--kb", str(MINIMAL_KB), "list").stdout.decode()
    assert out.index("Launching") < out.index("D1") < out.index("Hangs") < out.index("D2")
    assert "[verify]" in out.split("D2")[1].split("\n")[0]
