"""`triage log` on the two shapes of big log that used to break it, beside an ordinary log.

- every line a new rank prefix: `[rankN]: [Rank N] Watchdog caught collective operation timeout`
  with N rising, so per-rank state grows with the log unless it is bounded (target: peak RSS
  under 100 MiB at --size-mb 2048);
- every line a hit: the same failure line on every line of 8 ranks, so every line goes through
  the signatures and the evidence (target: at least 1/10 of the ordinary log's throughput);
- an ordinary multi-rank training log of the same size, for the comparison.

Each log is generated in a temporary directory (removed afterwards) and read once to warm the page
cache; then `triage log` (auto engine) runs on it; prints MB/s and the peak RSS of the triage
process itself (its rusage; grep runs beside it in a process of its own).

    python bench/bench_log_hostile.py [--size-mb 2048]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MEMORY_TARGET_MIB = 100
SPEED_TARGET = 0.1

WATCHDOG = (
    "[Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4, OpType=ALLREDUCE, "
    "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600010 milliseconds before timing out."
)


def ordinary(step: int) -> str:
    rank = step % 8
    return (
        f"[default{rank}]:[2026-11-22 04:{(step // 60000) % 60:02d}:{(step // 1000) % 60:02d},"
        f"{step % 1000:03d}] step {step} loss {((step * 7919) % 10000) / 4000:.4f} lr 3.0e-04 "
        f"grad_norm {((step * 104729) % 3000) / 1000:.3f} tokens/s {10000 + step % 9000}\n"
    )


def rising_rank(step: int) -> str:
    return f"[rank{step}]: " + WATCHDOG.format(r=step) + "\n"


def every_line_a_hit(step: int) -> str:
    return f"[default{step % 8}]:[rank{step % 8}]: " + WATCHDOG.format(r=step % 8) + "\n"


def generate(path: Path, size: int, line: Callable[[int], str]) -> int:
    written = step = 0
    with path.open("w") as out:
        while written < size:
            block = "".join(line(step + i) for i in range(20000))
            step += 20000
            out.write(block)
            written += len(block)
    return written


def run(path: Path) -> tuple[float, float, int]:
    """(seconds, peak RSS in MiB, exit status) of `triage log PATH`."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    start = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "triage", "log", str(path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.monotonic() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    return elapsed, usage.ru_maxrss / 1024, proc.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=2048)
    args = parser.parse_args()
    size = args.size_mb << 20
    results: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory(prefix="triage-bench-") as tmp:
        for name, line in (
            ("ordinary", ordinary),
            ("new rank prefix every line", rising_rank),
            ("every line a hit", every_line_a_hit),
        ):
            path = Path(tmp) / "job.log"
            written = generate(path, size, line)
            with path.open("rb") as handle:
                while handle.read(16 << 20):
                    pass
            seconds, rss, code = run(path)
            path.unlink()
            results[name] = (written / (1 << 20) / seconds, rss)
            print(
                f"{name:<28} {written / (1 << 20):8.0f} MB {seconds:7.1f} s {results[name][0]:8.1f} MB/s "
                f"peak RSS {rss:6.1f} MiB (exit {code})"
            )
    base = results["ordinary"][0]
    hits = results["every line a hit"][0]
    rising_rss = results["new rank prefix every line"][1]
    print(f"every-line-a-hit throughput: {hits / base:.2f} of ordinary (target >= {SPEED_TARGET:g})")
    print(
        f"peak RSS with a new rank prefix on every line: {rising_rss:.1f} MiB (target < {MEMORY_TARGET_MIB})"
    )
    return 0 if hits / base >= SPEED_TARGET and rising_rss < MEMORY_TARGET_MIB else 1


if __name__ == "__main__":
    raise SystemExit(main())
