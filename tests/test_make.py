"""The two README commands' first minutes: `make` says what it installs and why before it does, pip
shows its progress, and the way to put `triage` on PATH is printed. `apt-get`, `id` and `sudo` are
stand-ins on PATH (the tests cannot install system packages or change user); make and sh are real."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO

MAKE = shutil.which("make")
pytestmark = pytest.mark.skipif(MAKE is None, reason="make is not installed")


def _stub(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


def _system_deps(tmp_path: Path, uid: int, sudo: bool) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "apt.log"
    _stub(bin_dir, "id", f"echo {uid}")
    _stub(bin_dir, "apt-get", f'echo "apt-get $*" >> {log}; echo "apt-get ran: $*"')
    _stub(bin_dir, "env", 'shift; "$@"')  # env VAR=value cmd ...: run cmd (the stand-in apt-get)
    if sudo:
        _stub(bin_dir, "sudo", '[ "$1" = "-n" ] && shift; [ "$1" = true ] && exit 0; "$@"')
    assert MAKE is not None
    return subprocess.run(
        [MAKE, "-s", "--no-print-directory", "system-deps", "SHELL=/bin/sh"],
        cwd=REPO,
        env={"PATH": str(bin_dir), "HOME": str(tmp_path)},  # no chromium on this PATH
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_make_test_says_what_it_installs_and_why_before_installing(tmp_path: Path) -> None:
    done = _system_deps(tmp_path, uid=0, sudo=False)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "real browser" in out and "chromium is not installed" in out
    assert out.index("Installing it now: apt-get install chromium") < out.index("apt-get ran: update")
    assert "apt-get ran: install -y -qq chromium" not in out  # its own output goes to /dev/null
    assert (tmp_path / "apt.log").read_text().splitlines() == [
        "apt-get update -qq",
        "apt-get install -y -qq chromium",
    ]
    assert out.rstrip().endswith("chromium installed.")


def test_make_test_uses_sudo_when_it_needs_no_password(tmp_path: Path) -> None:
    done = _system_deps(tmp_path, uid=1000, sudo=True)
    assert done.returncode == 0, done.stderr
    assert "apt-get install -y -qq chromium" in (tmp_path / "apt.log").read_text()


def test_make_test_without_root_says_the_command_to_run(tmp_path: Path) -> None:
    done = _system_deps(tmp_path, uid=1000, sudo=False)
    assert done.returncode != 0
    assert "chromium is not installed" in done.stdout
    assert "Run: sudo apt-get install -y chromium" in done.stderr
    assert not (tmp_path / "apt.log").exists()


def test_install_shows_pip_progress_and_how_to_put_triage_on_path(tmp_path: Path) -> None:
    assert MAKE is not None
    plan = subprocess.run(
        [MAKE, "-n", "--no-print-directory", "run", f"VENV={tmp_path / 'venv'}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.splitlines()
    install = next(i for i, line in enumerate(plan) if "pip install" in line and "torch" in line)
    assert " -q " not in plan[install] and "--progress-bar on" in plan[install]
    said = "\n".join(plan[:install])
    assert "torch" in said and "a few minutes" in said  # said before the long download starts
    after = "\n".join(plan[install:])
    assert f"source {tmp_path / 'venv'}/bin/activate" in after
