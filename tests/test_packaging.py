"""The built wheel carries the knowledge: `triage ask` works from any directory after installing it.

Dependencies are made importable from the test's own environment through a .pth file instead of
being downloaded: resolving them is pip's job; what this test checks is the wheel itself (its
files, its entry point and the knowledge bundled inside it).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow  # builds and installs a wheel


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(REPO),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (built,) = out.glob("triage-*.whl")
    return built


def test_wheel_contains_package_probes_and_knowledge(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "triage/_knowledge/compiled.json" in names
    assert "triage/_knowledge/graph.yaml" in names
    assert any(n.startswith("triage/_knowledge/entries/D09-") for n in names)
    assert "probes/dist/__init__.py" in names or any(n.startswith("probes/dist/") for n in names)
    assert any(n.startswith("triage/repro/scripts/") for n in names)
    assert any(n.startswith("triage/site/assets/") for n in names)
    assert not any(n.startswith("tests/") for n in names)


def install(wheel: Path, venv: Path) -> None:
    """The wheel in a fresh venv, as `pip install .` leaves it (its dependencies from this one)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    vpy = venv / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(vpy), "install", "--no-deps", "-q", str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    purelib = subprocess.run(
        [str(vpy), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(purelib) / "deps-from-test-env.pth").write_text("\n".join(site.getsitepackages()) + "\n")


def test_installed_wheel_answers_from_any_directory(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    install(wheel, venv)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TRIAGE_KNOWLEDGE")}

    def installed_triage(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(venv / "bin" / "triage"), *args],
            cwd=elsewhere,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    result = installed_triage("ask", "--json", "hangs at end of epoch")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["best"]["id"] in ("D9", "D22")
    assert data["best"]["source"].startswith("entries/")
    check = installed_triage("kb", "check")
    assert check.returncode == 0, check.stderr
    assert "_knowledge" in check.stdout  # the bundled copy, not a checkout


# `triage` as a command: at the start, after a pipe, inside $( ), or as `python -m triage`.
_TRIAGE_CALL = re.compile(r"(?:^|\|\s*|\$\(|-m\s+)triage(?=\s|$|\))([^|<>;)]*)")


def _readme_commands() -> list[str]:
    """Every line of the README's bash blocks that runs triage, comments dropped."""
    text = (REPO / "README.md").read_text()
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for raw in block.splitlines():
            line = re.sub(r"\s#\s.*$", "", raw).strip()
            if _TRIAGE_CALL.search(line):
                lines.append(line)
    return lines


def test_every_readme_command_parses() -> None:
    """Each `triage ...` the README shows names a real command with real options."""
    from triage.main import _command_modules, build_parser

    parser = build_parser(_command_modules([]))
    commands = _readme_commands()
    assert len(commands) > 30
    for line in commands:
        call = _TRIAGE_CALL.search(line)
        assert call is not None
        try:
            parser.parse_args(shlex.split(call.group(1)))
        except SystemExit as exc:
            assert exc.code == 0, line  # only --help and --version end the parse, with 0


# README lines run exactly as typed once `triage` is on PATH (`source .venv/bin/activate`, or
# `pip install --user .` on a cluster), with what each must exit with.
AS_TYPED = {
    "triage --version": 0,
    "python -m triage --version": 0,
    'triage ask "hangs at end of epoch"': 0,
    "triage show D9": 0,
    "triage list": 0,
    "triage kb check": 0,
    "triage repro --list": 0,
    "triage report > issue.md": 0,
    'eval "$(triage completion bash)"': 0,
}


ACTIVATE = "source .venv/bin/activate"


def test_the_readme_works_as_typed_after_installing(wheel: Path, tmp_path: Path) -> None:
    """The clone's .venv as `make run` leaves it, the README's PATH step, then its commands."""
    workdir = tmp_path / "clone"
    workdir.mkdir()
    install(wheel, workdir / ".venv")
    shown = [*_readme_commands(), "python -m triage --version"]
    assert any(line.startswith(ACTIVATE) for line in (REPO / "README.md").read_text().splitlines())
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TRIAGE_KNOWLEDGE", "VIRTUAL_ENV")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if "venv" not in p)
    before = subprocess.run(
        ["bash", "-c", "triage --version"], cwd=workdir, env=env, capture_output=True, check=False
    )
    assert before.returncode == 127  # "command not found" until the step the README gives
    for line, status in AS_TYPED.items():
        assert line in shown, f"the README no longer shows {line!r}"
        done = subprocess.run(
            ["bash", "-c", f"{ACTIVATE} && {line}"],
            cwd=workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == status, (line, done.stderr[-500:])
        assert "Traceback" not in done.stderr, line
    assert (workdir / "issue.md").read_text().startswith("# triage report: ")
