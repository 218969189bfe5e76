"""`triage hang` wall time on real hung jobs of 2 and 3 ranks (target: at most 10 s for 2-4 ranks).

Starts each hang reproduction (torchrun, CPU/gloo), waits until it is frozen, then times the whole
`triage hang --json --pid LAUNCHER` process three times and prints the median and the worst.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from triage.repro.hangs import HANGS, hung_job  # noqa: E402


def main() -> int:
    print(f"{'scenario':<10} {'ranks':>5} {'median s':>9} {'worst s':>8}  first diagnosis")
    for scenario in HANGS:
        with hung_job(scenario) as job:
            times = []
            out = ""
            for _ in range(3):
                started = time.perf_counter()
                done = subprocess.run(
                    [sys.executable, "-m", "triage", "hang", "--json", "--pid", str(job.launcher_pid)],
                    capture_output=True, text=True, cwd=REPO, check=False, timeout=60,
                )  # fmt: skip
                times.append(time.perf_counter() - started)
                out = done.stdout
        first = out.split('"id": "', 1)[1].split('"', 1)[0] if '"id": "' in out else "-"
        print(
            f"{scenario.id:<10} {scenario.nproc:>5} {statistics.median(times):>9.2f} {max(times):>8.2f}  {first}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
