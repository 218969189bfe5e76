"""The core and the plain front ends never import textual (the `ask` path must stay light)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

PROBE = textwrap.dedent(
    """
    import contextlib, io, sys
    import triage, triage.kb.loader, triage.core.matcher, triage.core.walker, triage.main
    import triage.tui, triage.core.session, triage.core.suggest, triage.render.conversation, probes.runners
    import triage.render.report, triage.tui.command, triage.cli.walk
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = triage.main.main(["ask", "training hangs at the end of the epoch"])
        walked = triage.main.main(["walk", "--no-probes", "--json", "--answer", "what_do_you_see=5",
                                  "--answer", "placement=1"])
    print(code, walked, "D9" in out.getvalue(), '"id": "D3"' in out.getvalue())
    print(sorted(m for m in sys.modules if m == "textual" or m.startswith("textual.")))
    """
)


def fresh_python(code: str) -> subprocess.CompletedProcess[str]:
    """Run `code` in a new interpreter from the repository, as a user's process would start."""
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        timeout=60,
        check=False,
    )


def test_importing_the_core_and_running_ask_and_walk_does_not_import_textual() -> None:
    done = fresh_python(PROBE)
    assert done.returncode == 0, done.stderr
    status, modules = done.stdout.strip().splitlines()[-2:]
    assert status == "0 0 True True"
    assert modules == "[]"


def test_the_app_module_does_import_textual() -> None:
    """The check above would pass vacuously if textual were never importable here."""
    done = fresh_python("import sys, triage.tui.app; print('textual' in sys.modules)")
    assert done.stdout.strip() == "True", done.stderr


ASK_ONLY = textwrap.dedent(
    """
    import contextlib, io, sys
    import triage.main
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = triage.main.main(["ask", "NCCL watchdog timeout after the epoch ends"])
    heavy = ("textual", "torch", "yaml", "markdown_it", "rich", "probes")
    print(code, sorted({m.split(".")[0] for m in sys.modules if m.split(".")[0] in heavy}))
    """
)


def test_the_ask_path_loads_no_textual_torch_yaml_or_markdown() -> None:
    done = fresh_python(ASK_ONLY)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] in ("0 []", "1 []"), done.stdout
