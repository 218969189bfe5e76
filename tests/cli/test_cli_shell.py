"""What a CLI people keep installed must have: -V, a --help that lists every command on one line,
and tab completion that works in a real bash."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import REPO, CliResult
from triage import __version__

CLI_DIR = REPO / "triage" / "cli"
FRONT_END_COMMANDS = ("tui", "docs")


def _commands() -> list[str]:
    names = [p.stem for p in CLI_DIR.glob("*.py") if not p.name.startswith("_")]
    return sorted([*names, *FRONT_END_COMMANDS])


@pytest.mark.parametrize("flag", ["-V", "--version"])
def test_version_flag(run_cli: Callable[..., CliResult], flag: str) -> None:
    out = run_cli(flag)
    assert out.returncode == 0
    assert out.stdout.decode().strip() == f"triage {__version__}"


@pytest.mark.parametrize("columns", [80, 120])
def test_help_lists_every_command_on_one_line(run_cli: Callable[..., CliResult], columns: int) -> None:
    out = run_cli("--help", env={"COLUMNS": str(columns)})
    assert out.returncode == 0
    text = out.stdout.decode()
    for line in text.splitlines():
        assert len(line) <= columns, line
    listed = dict(re.findall(r"^    (\w+) +(\S.*)$", text, re.MULTILINE))
    assert sorted(listed) == _commands()
    lines = text.splitlines()
    for name in listed:
        (index,) = [i for i, line in enumerate(lines) if re.match(rf"^    {name} +\S", line)]
        # the next line is the next command (or the end of the list), not a wrapped tail
        following = lines[index + 1]
        assert re.match(r"^    \w+ +\S", following) or not following.strip(), following


def _complete(script: str, words: list[str]) -> list[str]:
    """COMPREPLY of the generated bash function for a command line whose last word is being typed."""
    quoted = " ".join("'" + w.replace("'", "'\\''") + "'" for w in words)
    program = (
        f"{script}\n"
        f"COMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}; _triage\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    done = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", program],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
        cwd=REPO,
    )
    return [line for line in done.stdout.splitlines() if line]


@pytest.fixture(scope="module")
def bash_script() -> str:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run(
        [sys.executable, "-m", "triage", "completion", "bash"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env=env,
    )
    return done.stdout


def test_bash_completes_commands_options_ids_and_files(bash_script: str, tmp_path: Path) -> None:
    assert set(_complete(bash_script, ["triage", ""])) >= set(_commands())
    assert set(_complete(bash_script, ["triage", "re"])) == {"repro", "report"}
    assert "--brief" in _complete(bash_script, ["triage", "ask", "--b"])
    shown = _complete(bash_script, ["triage", "show", "D2"])
    assert "D2" in shown and "D20" in shown and all(w.startswith("D2") for w in shown)
    assert _complete(bash_script, ["triage", "probe", "ve"]) == ["versions"]
    assert _complete(bash_script, ["triage", "completion", ""]) == ["bash", "zsh", "fish"]
    # a global option with a value is skipped when finding the command
    assert "--json" in _complete(bash_script, ["triage", "--kb", "knowledge", "show", "--j"])
    # files after `log` and after an option that takes a path
    assert "README.md" in _complete(bash_script, ["triage", "log", "READ"])
    assert "Makefile" in _complete(bash_script, ["triage", "probe", "--deepspeed-config", "Make"])
    assert _complete(bash_script, ["triage", "ask", "--top", ""]) == []


def test_zsh_and_fish_scripts_cover_every_command(run_cli: Callable[..., CliResult]) -> None:
    zsh = run_cli("completion", "zsh").stdout.decode()
    assert "bashcompinit" in zsh and "complete -o default -F _triage triage" in zsh
    fish = run_cli("completion", "fish").stdout.decode()
    for name in _commands():
        assert re.search(rf"-a {name} -d '", fish), name
    assert "__fish_seen_subcommand_from show' -a 'D1 D2 D3" in fish
    for shell, text in (("zsh", zsh), ("fish", fish)):
        binary = shutil.which(shell)
        if binary is not None:  # syntax-check with the real shell where it is installed
            flag = "-n" if shell == "zsh" else "--no-execute"
            subprocess.run([binary, flag], input=text, text=True, check=True, timeout=30)


def test_completion_rejects_an_unknown_shell(run_cli: Callable[..., CliResult]) -> None:
    out = run_cli("completion", "tcsh")
    assert out.returncode == 2
    assert "invalid choice" in out.stderr.decode()
