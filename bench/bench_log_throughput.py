"""`triage log` throughput beside `grep -E -i` with the same patterns, and peak memory.

Generates a multi-rank torchrun-style log (default ~1 GB) with real failure output sprinkled in,
in a temporary directory removed afterwards, reads it once so the page cache is warm for every
run, then times, alternating so that load on the machine hits both alike:
  - grep -E -i -c with the knowledge's signature regexes translated to ERE (LC_ALL=C);
  - triage log (auto engine: grep when on PATH) on the whole log;
then once each: triage log on a quarter of the log (memory must not grow with size), on that
quarter from a pipe on stdin, and with --engine python (no grep) on a small slice. Prints each
throughput (median of the runs), the ratio to grep (target: >= 0.33) and peak RSS. (triage's own
grep searches for the signatures' literal anchors, then matches the regexes on those lines only.)

    python bench/bench_log_throughput.py [--size-mb 1024] [--runs 3] [--python-mb 64]

grep's output goes to a pipe, never /dev/null: GNU grep notices a /dev/null stdout and stops at
the first match (even with -c), which would time a fraction of the file.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

FAILURES = sorted((REPO / "tests" / "core" / "logscan" / "data").glob("repro-*.log"))
TARGET = 1 / 3


def generate(path: Path, size: int) -> int:
    """Write ~size bytes of 8-rank training output with a failure every ~50 MB; returns bytes."""
    snippets = [f.read_text() for f in FAILURES]
    written = 0
    step = 0
    with path.open("w") as out:
        while written < size:
            block = []
            for _ in range(5000):
                rank = step % 8
                block.append(
                    f"[default{rank}]:[2026-11-22 04:{(step // 60000) % 60:02d}:{(step // 1000) % 60:02d},"
                    f"{step % 1000:03d}] step {step} loss {((step * 7919) % 10000) / 4000:.4f} "
                    f"lr 3.0e-04 grad_norm {((step * 104729) % 3000) / 1000:.3f} tokens/s {10000 + step % 9000}\n"
                )
                step += 1
            text = "".join(block)
            if (written // (50 << 20)) != ((written + len(text)) // (50 << 20)):
                text += snippets[(written // (50 << 20)) % len(snippets)]
            out.write(text)
            written += len(text)
    return written


def head_copy(source: Path, target: Path, size: int) -> int:
    """Copy the first ~size bytes of `source` (whole lines) to `target`; returns bytes."""
    with source.open("rb") as src, target.open("wb") as out:
        while size > 0:
            data = src.read(min(size, 4 << 20))
            size -= len(data)
            if size <= 0 or not data:
                data = data[: data.rfind(b"\n") + 1]
                size = 0
            out.write(data)
    return target.stat().st_size


def ere(pattern: str) -> str | None:
    """A Python regex as POSIX ERE for GNU grep, or None when it uses what ERE lacks."""
    if re.search(r"\(\?[=!<]", pattern):
        return None
    out = pattern.replace("(?:", "(").replace("*?", "*").replace("+?", "+")
    out = out.replace(r"\d", "[0-9]").replace(r"\s", "[[:space:]]").replace(r"\S", "[^[:space:]]")
    return out


def _hwm_mib(pid: int) -> float:
    """Peak resident memory of a live process (VmHWM), 0 when it has gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _tree(pid: int) -> list[int]:
    """`pid` and its descendants, from /proc."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        with contextlib.suppress(OSError):  # it may end while we look
            for task in os.scandir(f"/proc/{current}/task"):
                todo += [int(child) for child in Path(task.path, "children").read_text().split()]
    return found


def timed(command: list[str], stdin_from: list[str] | None = None) -> tuple[float, int, float]:
    """(seconds, exit status, peak RSS in MiB) of one child; its output is read through a pipe.

    The RSS is the sum of the peaks of the child and its descendants (triage and its grep),
    sampled from /proc every 20 ms while they run: wait4's ru_maxrss would start from this bench
    process's own size, which a child inherits at fork. With `stdin_from`, that command's output
    is piped in.
    """
    feeder = subprocess.Popen(stdin_from, stdout=subprocess.PIPE) if stdin_from else None
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdin=feeder.stdout if feeder else None, stdout=subprocess.PIPE)
    if feeder is not None and feeder.stdout is not None:
        feeder.stdout.close()
    peaks: dict[int, float] = {}
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.02):
            for pid in _tree(proc.pid):
                # the latest reading, not the largest: VmHWM only grows within one program, and a
                # child read between fork and exec shows its parent's size
                peaks[pid] = _hwm_mib(pid) or peaks.get(pid, 0.0)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    assert proc.stdout is not None
    while proc.stdout.read(1 << 16):
        pass
    status = proc.wait()
    elapsed = time.perf_counter() - start
    done.set()
    sampler.join()
    if feeder is not None:
        feeder.wait()
    return elapsed, status, sum(peaks.values())


def warm(*paths: Path) -> None:
    for path in paths:
        with path.open("rb") as handle:
            while handle.read(16 << 20):
                pass


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024, help="size of the generated log (default 1024)")
    parser.add_argument(
        "--runs", type=int, default=3, help="timed runs of grep and triage, alternated (default 3)"
    )
    parser.add_argument(
        "--python-mb", type=int, default=64, help="slice timed with --engine python (default 64; 0 skips)"
    )
    args = parser.parse_args()

    from triage.kb.loader import load_kb

    kb = load_kb()
    patterns = [sig.pattern for entry in kb.entries.values() for sig in entry.signatures]
    translated = [p for p in (ere(p) for p in patterns) if p]
    with tempfile.TemporaryDirectory(prefix="triage-bench-") as tmp:
        work = Path(tmp)
        (work / "patterns.txt").write_text("\n".join(translated) + "\n")
        big, quarter, small = work / "big.log", work / "quarter.log", work / "small.log"
        began = time.perf_counter()
        size = generate(big, args.size_mb << 20)
        qsize = head_copy(big, quarter, size // 4)
        ssize = head_copy(big, small, args.python_mb << 20) if args.python_mb else 0
        print(
            f"log: {size / 1e6:,.0f} MB, 8 ranks, {len(FAILURES)} kinds of failure sprinkled in"
            f" (generated in {time.perf_counter() - began:.0f} s)"
        )
        print(
            f"patterns: {len(translated)} of {len(patterns)} signatures as ERE for grep; {args.runs} runs each"
        )
        warm(big, quarter, *([small] if ssize else []))

        grep = ["env", "LC_ALL=C", "grep", "-E", "-i", "-c", "-f", str(work / "patterns.txt"), str(big)]
        triage = [sys.executable, "-m", "triage", "log", "--json"]
        grep_runs, triage_runs = [], []
        for _ in range(args.runs):
            grep_runs.append(timed(grep))
            triage_runs.append(timed([*triage, str(big)]))
        quarter_run = timed([*triage, str(quarter)])
        pipe_run = timed([*triage, "-"], stdin_from=["cat", str(quarter)])
        python_run = timed([*triage, "--engine", "python", str(small)]) if ssize else None

        statuses = [r[1] for r in grep_runs]
        others = [r[1] for r in (*triage_runs, quarter_run, pipe_run, *([python_run] if python_run else []))]
        if any(s not in (0, 1) for s in (*statuses, *others)):
            print(f"unexpected exit status: grep {statuses}, triage {others}")
            return 1

        g_s = statistics.median(r[0] for r in grep_runs)
        t_s = statistics.median(r[0] for r in triage_runs)
        ratio = g_s / t_s

        def row(label: str, mb: float, seconds: float, rss: float, note: str = "") -> None:
            print(f"{label:<28}{mb / seconds:8,.0f} MB/s  ({seconds:6.2f} s, peak RSS {rss:4.0f} MiB){note}")

        runs = ", ".join(f"{r[0]:.2f}" for r in grep_runs)
        row("grep -E -i -c", size / 1e6, g_s, max(r[2] for r in grep_runs), f"  runs: {runs} s")
        runs = ", ".join(f"{r[0]:.2f}" for r in triage_runs)
        row("triage log", size / 1e6, t_s, max(r[2] for r in triage_runs), f"  runs: {runs} s")
        row(
            "triage log, 1/4 of the log", qsize / 1e6, quarter_run[0], quarter_run[2], "  <- RSS flat in size"
        )
        row("triage log - (from a pipe)", qsize / 1e6, pipe_run[0], pipe_run[2], "  (1/4 of the log)")
        if python_run is not None:
            row(
                "triage log --engine python",
                ssize / 1e6,
                python_run[0],
                python_run[2],
                f"  ({ssize / 1e6:.0f} MB)",
            )
        verdict = "meets" if ratio >= TARGET else "MISSES"
        print(f"ratio triage/grep throughput: {ratio:.2f} ({verdict} the target of {TARGET:.2f})")
        print(f"total bench time: {time.perf_counter() - began:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
