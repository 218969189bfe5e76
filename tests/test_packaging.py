"""The built wheel carries the knowledge: `triage ask` works from any directory after installing it.

Dependencies are made importable from the test's own environment through a .pth file instead of
being downloaded: resolving them is pip's job; what this test checks is the wheel itself (its
files, its entry point and the knowledge bundled inside it).
"""

from __future__ import annotations

import json
import os
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


def test_installed_wheel_answers_from_any_directory(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
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
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TRIAGE_KNOWLEDGE")}
    result = subprocess.run(
        [str(venv / "bin" / "triage"), "ask", "--json", "hangs at end of epoch"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["best"]["id"] in ("D9", "D22")
    assert data["best"]["source"].startswith("entries/")
    check = subprocess.run(
        [str(venv / "bin" / "triage"), "kb", "check"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert check.returncode == 0, check.stderr
    assert "_knowledge" in check.stdout  # the bundled copy, not a checkout
