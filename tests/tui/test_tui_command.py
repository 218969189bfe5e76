"""`triage` with no command opens the app; without a terminal it says what to use instead."""

from __future__ import annotations

import subprocess
from collections.abc import Callable

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


def test_help_names_the_app_and_walk(run_cli: Run) -> None:
    out = run_cli("--help").stdout.decode()
    assert "tui" in out and "walk" in out
