"""The import contracts in pyproject.toml hold, catch a planted violation, and `ask` stays light."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

pytestmark = pytest.mark.skipif(not LINT_IMPORTS.exists(), reason="import-linter is not installed")


def _lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--config", str(root / "pyproject.toml")],
        capture_output=True,
        text=True,
        cwd=root,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root)},
        timeout=120,
        check=False,
    )


def _copy_tree(target: Path) -> Path:
    for name in ("triage", "probes"):
        shutil.copytree(
            REPO / name, target / name, ignore=shutil.ignore_patterns("__pycache__", "_knowledge")
        )
    shutil.copy(REPO / "pyproject.toml", target / "pyproject.toml")
    return target


def test_the_contracts_hold_on_the_tree() -> None:
    done = _lint_imports(REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


@pytest.mark.parametrize(
    ("module", "planted", "contract"),
    [
        ("triage/core/model.py", "import textual  # planted\n", "The core is pure"),
        ("triage/core/matcher.py", "import yaml  # planted\n", "The core is pure"),
        ("triage/core/walker.py", "from triage.render import terminal  # planted\n", "Layers"),
        ("triage/cli/show.py", "from triage.tui import app  # planted\n", "Front ends are independent"),
        ("probes/env.py", "from triage.cli import probe  # planted\n", "Probes and reproductions"),
    ],
)
@pytest.mark.slow  # runs import-linter on a copy of the tree for each case
def test_a_planted_violation_is_caught(tmp_path: Path, module: str, planted: str, contract: str) -> None:
    root = _copy_tree(tmp_path)
    path = root / module
    text = path.read_text(encoding="utf-8")
    # After the module docstring and `from __future__`, where a real import would go.
    anchor = "from __future__ import annotations\n"
    assert anchor in text
    path.write_text(text.replace(anchor, anchor + planted, 1), encoding="utf-8")
    done = _lint_imports(root)
    assert done.returncode != 0
    broken = [line for line in done.stdout.splitlines() if line.endswith("BROKEN")]
    assert any(line.startswith(contract) for line in broken), done.stdout
