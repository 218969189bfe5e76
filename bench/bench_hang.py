"""`triage hang` wall time on real hung jobs (target: at most 10 s for 2-4 ranks, bounded for 16).

Starts each hang reproduction (torchrun, CPU/gloo), waits until it is frozen, then times the whole
`triage hang --json --pid LAUNCHER` process three times and prints the median and the worst. Then
the same for the D21 job with its Flight Recorder dumped (read from the job's environment and
checked against the stacks), and for D21 with 16 ranks (`--ranks 16`, or `--no-16` to skip it:
starting 16 torch processes takes a while on a small machine).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from triage.repro.hangs import HANGS, HangScenario, hung_job  # noqa: E402


def _time(
    label: str, scenario: HangScenario, env: dict[str, str] | None = None, recorders: bool = False
) -> None:
    with hung_job(scenario, env=env, recorders=recorders, start_timeout_s=600) as job:
        times = []
        out = ""
        for _ in range(3):
            started = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-m", "triage", "hang", "--json", "--pid", str(job.launcher_pid)],
                capture_output=True, text=True, cwd=REPO, check=False, timeout=120,
                env={**os.environ, "TRIAGE_HANG_SELF": "1"},
            )  # fmt: skip
            times.append(time.perf_counter() - started)
            out = done.stdout
    first = out.split('"id": "', 1)[1].split('"', 1)[0] if '"id": "' in out else "-"
    agrees = "FR agrees" if "agrees with the stacks" in out else ""
    print(
        f"{label:<10} {scenario.nproc:>5} {statistics.median(times):>9.2f} {max(times):>8.2f}  {first} {agrees}",
        flush=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", type=int, default=16, help="ranks of the large job (default 16)")
    parser.add_argument("--no-16", dest="large", action="store_false", help="skip the large job")
    parser.add_argument(
        "--only", action="append", default=[], metavar="ID", help="time these scenarios only (repeatable)"
    )
    args = parser.parse_args()
    print(f"{'scenario':<10} {'ranks':>5} {'median s':>9} {'worst s':>8}  first diagnosis")
    for scenario in HANGS:
        if not args.only or scenario.id in args.only:
            _time(scenario.id, scenario)
    if args.only:
        return 0
    with tempfile.TemporaryDirectory() as dumps:
        env = {"TORCH_FR_BUFFER_SIZE": "64", "TORCH_FR_DUMP_TEMP_FILE": f"{dumps}/rank_"}
        _time("D21+FR", HANGS[0], env, recorders=True)
    if args.large:
        _time(f"D21x{args.ranks}", replace(HANGS[0], nproc=args.ranks))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
