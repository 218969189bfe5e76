"""Bad input to every command: FIFOs, YAML alias bombs, links to /dev/zero, huge and pathological
lines, deep nesting, malformed environment values, absurd arguments. Each case must end within its
bound with exit 2 and one line on stderr naming the problem: no hang, no traceback, no exit 3.
Hostile but valid input (a megabyte line built to make regexes backtrack) must end within its
bound with an answer (0 or 1).

The cases run concurrently in a module fixture (they are independent processes), then each is
checked by its own test."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import MINIMAL_KB, REPO

pytestmark = [pytest.mark.slow, pytest.mark.skipif(sys.platform != "linux", reason="FIFOs and /dev/zero")]

BOUND_S = 25.0  # a case's limit, generous for a loaded 2-core machine (a FIFO alone waits 3 s)


@dataclass(frozen=True)
class Case:
    name: str
    args: tuple[str, ...]
    stdin: bytes = b""
    env: dict[str, str] = field(default_factory=dict)
    valid: bool = False  # hostile but valid: an answer (0 or 1), not an error


@dataclass(frozen=True)
class Outcome:
    code: int
    stderr: str
    seconds: float


def _alias_bomb() -> str:
    text = "a0: &a0 [x, x, x, x, x, x, x, x, x]\n"
    for level in range(1, 10):
        text += f"a{level}: &a{level} [{', '.join([f'*a{level - 1}'] * 9)}]\n"
    return text


def make_files(root: Path) -> dict[str, Path]:
    """The hostile files, and knowledge directories that each hold one."""
    files = {
        "fifo": root / "fifo",
        "zero": root / "zero.log",
        "bomb": root / "bomb.yaml",
        "deep": root / "deep.yaml",
        "binary": root / "binary.log",
        "huge_line": root / "huge-line.log",
        "backtrack": root / "backtrack.log",
        "dir": root / "a-directory",
    }
    os.mkfifo(files["fifo"])
    files["zero"].symlink_to("/dev/zero")
    files["bomb"].write_text(_alias_bomb())
    files["deep"].write_text("[" * 100_000)
    files["binary"].write_bytes(b"\x7fELF\x00\x01" * 100)
    files["huge_line"].write_text("x" * (2 << 20) + "\n")
    files["backtrack"].write_text(("rank1 " * 180_000) + "exhausted\n" + "[rank0]: RuntimeError: boom\n")
    files["dir"].mkdir()
    broken = {
        "fifo": lambda path: os.mkfifo(path),
        "zero": lambda path: path.symlink_to("/dev/zero"),
        "bomb": lambda path: path.write_text(_alias_bomb()),
        "deep": lambda path: path.write_text("[" * 100_000),
        "listkey": lambda path: path.write_text("[a, b]: c\n"),
        "huge": lambda path: path.write_text("# " + "x" * (2 << 20) + "\n"),
    }
    for kind, plant in broken.items():
        kb = root / f"kb-{kind}"
        shutil.copytree(MINIMAL_KB, kb)
        entry = kb / "entries" / "D02-hang.yaml"
        entry.unlink()
        plant(entry)
        files[f"kb-{kind}"] = kb
    return files


def cases(f: dict[str, Path], tmp: Path) -> list[Case]:
    long_path = str(tmp / ("p" * 5000))
    found: list[Case] = []
    # every command that reads the knowledge, on each broken knowledge directory
    for kind in ("fifo", "zero", "bomb", "deep", "listkey", "huge"):
        kb = str(f[f"kb-{kind}"])
        for command in (
            ("ask", "address already in use"),
            ("show", "D1"),
            ("list",),
            ("walk", "--no-probes", "--answer", "root=1"),
            ("log", str(f["backtrack"])),
            ("docs", "build", "--out", str(tmp / f"site-{kind}")),
            ("kb", "check"),
        ):
            found.append(Case(f"kb-{kind}: {command[0]}", ("--kb", kb, *command)))
    found += [
        Case("global: --kb ''", ("--kb", "", "list")),
        Case("global: --kb FIFO", ("--kb", str(f["fifo"]), "list")),
        Case("global: TRIAGE_KNOWLEDGE FIFO", ("list",), env={"TRIAGE_KNOWLEDGE": str(f["fifo"])}),
        Case("global: unknown option", ("--bogus",)),
        Case("log: FIFO", ("log", str(f["fifo"]))),
        Case("log: /dev/zero link", ("log", str(f["zero"]))),
        Case("log: binary", ("log", str(f["binary"]))),
        Case("log: line over the cap", ("log", "--max-line-bytes", "1048576", str(f["huge_line"]))),
        Case(
            "log: line over the cap, python",
            ("log", "--engine", "python", "--max-line-bytes", "1048576", str(f["huge_line"])),
        ),
        Case("log: directory", ("log", str(f["dir"]))),
        Case("log: 5000-character path", ("log", long_path)),
        Case(
            "log: TRIAGE_LOG_MAX_LINE_BYTES=abc",
            ("log", str(f["backtrack"])),
            env={"TRIAGE_LOG_MAX_LINE_BYTES": "abc"},
        ),
        Case(
            "log: TRIAGE_LOG_ENGINE=bogus", ("log", str(f["backtrack"])), env={"TRIAGE_LOG_ENGINE": "bogus"}
        ),
        Case("log: empty stdin", ("log", "-")),
        Case("log: binary stdin", ("log", "-"), stdin=b"\x00" * 1000),
        Case("ask: empty", ("ask", "-")),
        Case("ask: stdin over 1 MB", ("ask", "-"), stdin=b"x " * 600_000),
        Case("ask: not UTF-8", ("ask", "-"), stdin=b"\xff\xfe hang"),
        Case("show: 130 KB id", ("show", "x" * 130_000)),
        Case("show: empty id", ("show", "")),
        Case("walk: stdin ends", ("walk", "--no-probes")),
        Case("walk: bad answer", ("walk", "--no-probes", "--answer", "nope")),
        Case("walk: --probe-timeout nan", ("walk", "--probe-timeout", "nan")),
        Case("walk: --probe-timeout inf", ("walk", "--probe-timeout", "inf")),
        Case("walk: config is a FIFO", ("walk", "--accelerate-config", str(f["fifo"]))),
        Case("walk: config is an alias bomb", ("walk", "--accelerate-config", str(f["bomb"]))),
        Case("probe: --timeout nan", ("probe", "env", "--timeout", "nan")),
        Case("probe: --timeout inf", ("probe", "env", "--timeout", "inf")),
        Case("probe: config is /dev/zero", ("probe", "configs", "--accelerate-config", str(f["zero"]))),
        Case("probe: config nests 100000 deep", ("probe", "configs", "--accelerate-config", str(f["deep"]))),
        Case("probe: DeepSpeed config is a FIFO", ("probe", "configs", "--deepspeed-config", str(f["fifo"]))),
        Case("probe: TRIAGE_DIST_FAULT garbage", ("probe", "env"), env={"TRIAGE_DIST_FAULT": "garbage"}),
        Case("probe: unknown probe", ("probe", "nosuch")),
        Case("repro: empty id", ("repro", "")),
        Case("repro: --save in a missing directory", ("repro", "D8", "--save", "/nonexistent/x")),
        Case("docs: --out is a FIFO", ("docs", "build", "--out", str(f["fifo"]))),
        Case("docs: 5000-character --out", ("docs", "build", "--out", long_path)),
        Case("kb: new without an id", ("kb", "new", "")),
        Case("lint: FIFO", ("lint", str(f["fifo"]))),
        Case("lint: /dev/zero link", ("lint", str(f["zero"]))),
        Case("lint: binary", ("lint", str(f["binary"]))),
        Case("lint: 100000 brackets", ("lint", str(f["deep"]))),
        Case("hang: merge a FIFO", ("hang", "merge", str(f["fifo"]))),
        Case("hang: merge /dev/zero", ("hang", "merge", str(f["zero"]))),
        Case("report: log is a FIFO", ("report", "--no-probes", "--log", str(f["fifo"]))),
        Case("report: log is /dev/zero", ("report", "--no-probes", "--log", str(f["zero"]))),
        Case("report: --timeout nan", ("report", "--timeout", "nan")),
        Case("tui: not a terminal", ("tui",)),
        Case("tui: --probe-timeout inf", ("tui", "--probe-timeout", "inf")),
        Case("completion: unknown shell", ("completion", "tcsh")),
        # hostile but valid: an answer, within the bound
        Case("log: 1 MB line built to backtrack", ("log", str(f["backtrack"])), valid=True),
        Case("log: the same, python engine", ("log", "--engine", "python", str(f["backtrack"])), valid=True),
        Case(
            "ask: 1 MB built to backtrack", ("ask", "-"), stdin=b"rank1 " * 160_000 + b"exhausted", valid=True
        ),
        Case("ask: 100 KB query", ("ask", "rank1 exhausted " * 6_000), valid=True),
    ]
    return found


def run(case: Case) -> Outcome:
    env = {k: v for k, v in os.environ.items() if k not in ("TRIAGE_KNOWLEDGE", "TRIAGE_DEBUG")}
    env["PYTHONPATH"] = str(REPO)
    env.update(case.env)
    start = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "triage", *case.args],
            input=case.stdin,
            capture_output=True,
            env=env,
            cwd=REPO,
            timeout=BOUND_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return Outcome(-1, "(still running at the bound: a hang)", BOUND_S)
    return Outcome(done.returncode, done.stderr.decode("utf-8", "replace"), time.monotonic() - start)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    root = tmp_path_factory.mktemp("bad")
    all_cases = cases(make_files(root), root)
    with ThreadPoolExecutor(max_workers=3) as pool:
        return dict(zip([c.name for c in all_cases], pool.map(run, all_cases), strict=True))


_ALL = cases(
    {k: Path(k) for k in ("fifo", "zero", "bomb", "deep", "binary", "huge_line", "backtrack", "dir")}
    | {f"kb-{k}": Path(k) for k in ("fifo", "zero", "bomb", "deep", "listkey", "huge")},
    Path("."),
)


def test_the_suite_covers_every_command() -> None:
    from triage.main import _command_names

    covered = {c.args[c.args.index("--kb") + 2] if "--kb" in c.args else c.args[0] for c in _ALL if c.args}
    assert set(_command_names()) <= covered | {"--bogus"}, set(_command_names()) - covered


@pytest.mark.parametrize("case", _ALL, ids=[c.name for c in _ALL])
def test_bad_input_ends_in_one_line(case: Case, outcomes: dict[str, Outcome]) -> None:
    outcome = outcomes[case.name]
    assert outcome.code != -1, f"hung: still running after {BOUND_S:g}s"
    assert outcome.seconds < BOUND_S
    assert "Traceback" not in outcome.stderr and outcome.code != 3, outcome.stderr
    if case.valid:
        assert outcome.code in (0, 1), outcome.stderr
        return
    assert outcome.code == 2, outcome.stderr
    lines = outcome.stderr.strip().splitlines()
    if case.args[:1] == ("--kb",) and "kb" in case.args and "check" in case.args:
        assert lines and all(": KB" in line for line in lines[:-1]), lines  # one line per problem
        return
    assert len(lines) == 1 and lines[0].startswith("triage: error: "), outcome.stderr
    assert len(lines[0]) < 600, "the line quotes too much of the input"
