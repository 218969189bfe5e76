"""Whole-process time of `triage ask` from a wheel install, against `python -c pass` in that install.

    python bench/bench_ask_speed.py [--runs N] [--keep DIR]

Target: median `triage ask` <= 3.5x median `python -c pass` (the issue's budget for the path users
feel). The wheel is built from this checkout (`pip wheel --no-deps`, with the build backend already
installed here) and installed without its dependencies into a fresh virtual environment in a
temporary directory: `ask` imports none of them, and no network is needed. The installer compiles
the bytecode, as `pip install` does for users. The commands run in turns, so that a change in the
machine's load shifts them all alike. Also prints which heavy modules the ask process imported
(should be none).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
QUERIES = [
    "hangs at end of epoch",
    "RuntimeError: Address already in use",
    "all processes end up on GPU 0",
    "it does not work",
    "training freezes after a few hundred steps on 8 GPUs",  # no answer, but the separating question
]
HEAVY = ("torch", "textual", "markdown_it", "yaml", "rich", "rapidfuzz", "wordfreq", "argparse")
TARGET = 3.5


def timed(commands: dict[str, list[str]], runs: int, cwd: Path) -> dict[str, float]:
    """Median wall time of each command, run in turns (one of each per round), so that a change in
    the machine's load during the measurement affects them all alike."""
    samples: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, cmd in commands.items():
            start = time.perf_counter()
            subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd, check=False)
            samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in samples.items()}


def install(work: Path) -> Path:
    """Build the wheel and install it into a new venv under `work`; the venv's bin directory."""
    wheels = work / "wheels"
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
            str(wheels),
            str(REPO),
        ],
        check=True,
    )
    wheel = next(wheels.glob("triage-*.whl"))
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", str(wheel)],
        check=True,
    )
    return venv / "bin"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--keep", type=Path, help="build and install in this directory and keep it")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="triage-speed-") as scratch:
        work = args.keep or Path(scratch)
        work.mkdir(parents=True, exist_ok=True)
        bin_dir = install(work)
        python, triage = str(bin_dir / "python"), str(bin_dir / "triage")
        neutral = Path(scratch)  # not the checkout: the installed package must be the one imported
        commands = {"pass": [python, "-c", "pass"], **{q: [triage, "ask", q] for q in QUERIES}}
        timed(commands, 3, neutral)  # warm the page cache
        medians = timed(commands, args.runs, neutral)
        floor = medians.pop("pass")
        results = medians
        probe = (
            "import sys, io, contextlib\n"
            "from triage.main import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    main(['ask', 'hangs at end of epoch'])\n"
            f"print(','.join(m for m in {HEAVY!r} if m in sys.modules) or 'none')"
        )
        heavy = subprocess.run(
            [python, "-c", probe], capture_output=True, text=True, cwd=neutral, check=False
        )
    print(f"python -c pass        median {floor * 1000:7.1f} ms  ({args.runs} runs, wheel install)")
    for query, seconds in results.items():
        print(f"triage ask {query[:30]!r:34} median {seconds * 1000:7.1f} ms  ratio {seconds / floor:4.2f}x")
    worst = max(results.values()) / floor
    print(f"worst ratio {worst:.2f}x (target <= {TARGET}x): {'met' if worst <= TARGET else 'NOT met'}")
    print(f"heavy modules imported by ask: {heavy.stdout.strip() or heavy.stderr.strip()[-200:]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
