"""`triage` with no command opens the app; without a terminal it says what to use instead."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

CliResult = subprocess.CompletedProcess[bytes]

Run = Callable[..., CliResult]


def test_without_a_terminal_the_app_points_to_walk_and_ask(run_cli: Run) -> None:
    for args in ((), ("tui",)):
        done = run_cli(*args, stdin=b"")
        assert done.returncode == 2
        assert done.stderr.decode().strip() == (
            "triage: error: the interactive app needs a terminal; in scripts use "
            "`triage walk --answer NODE=N --json` or `triage ask`"
        )
        assert done.stdout == b""


def test_bad_options_are_one_line_errors(run_cli: Run) -> None:
    done = run_cli("tui", "--probe-timeout", "0", stdin=b"")
    assert done.returncode == 2
    assert done.stderr.decode().strip() == (
        "triage: error: --probe-timeout must be above 0 and at most 3600 seconds, not 0"
    )


def test_a_report_dir_is_a_folder_or_one_the_first_export_creates(run_cli: Run, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    for given, error in (
        (tmp_path / "file", f"--report-dir: not a directory: {tmp_path / 'file'}"),
        (
            tmp_path / "no" / "reports",
            f"--report-dir: {tmp_path / 'no' / 'reports'}: its parent folder does not exist",
        ),
        (tmp_path / "reports", "the interactive app needs a terminal"),  # accepted: past the check
    ):
        done = run_cli("tui", "--report-dir", str(given), stdin=b"")
        assert done.returncode == 2 and done.stderr.decode().startswith(f"triage: error: {error}")
    assert not (tmp_path / "reports").exists()  # created at the first export, not before


def test_help_names_the_app_and_walk(run_cli: Run) -> None:
    out = run_cli("--help").stdout.decode()
    assert "tui" in out and "walk" in out
