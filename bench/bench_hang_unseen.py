"""`triage hang` on hung jobs written apart from the engine: does it name the entry and the odd ranks?

The jobs in eval/hangs/ were written as users write them, without reading triage/core/hang, and
none is tuned on (those marked `Held out:` were written after the engine was changed on the
others, and measured once): each header says its entry (`Label:`), the odd ranks out by construction (`Odd
ranks:`) and how it is started (`Launch: torchrun N`, `mp.spawn N`, `python N`: one `python` per
rank from a shell loop with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT; `world W`: the world
size the script asks for where ranks are missing; `nnodes N`: the nodes torchrun is told of, this
one started; `gone`: the odd ranks exit, the others wait for them). For each job: start it, wait until it is
frozen, run `triage hang --json --pid PID` with the launcher's PID and then with a rank's, print
expected vs got, and end every process of the job whatever happens (hangs.hung_job).

    python bench/bench_hang_unseen.py              # every job
    python bench/bench_hang_unseen.py --only d9_token_budget -v   # one job, with each rank's reading
    python bench/bench_hang_unseen.py --only NAME --dump tests/fixtures/hang/pyspy/unseen  # + py-spy dumps
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from probes.hang.discover import all_procs  # noqa: E402
from probes.hang.pyspy import pyspy_binary  # noqa: E402
from triage.repro.hangs import HangScenario, hung_job  # noqa: E402
from triage.repro.runner import processes_with_token  # noqa: E402

JOBS = REPO / "eval" / "hangs"
LAUNCHERS = {"torchrun": "torchrun", "mp.spawn": "script", "python": "python"}


@dataclass(frozen=True)
class Job:
    """One job of eval/hangs/ with what its header says."""

    name: str
    label: str
    odd: tuple[int, ...]
    launch: str
    scenario: HangScenario
    held_out: bool  # `Held out:` in its header: written after the engine was changed on the others


def read_job(path: Path) -> Job:
    """The job's header fields (`Label:`, `Odd ranks:`, `Launch:`) as a scenario hung_job starts."""
    text = path.read_text(encoding="utf-8")
    fields = dict(re.findall(r"^(Label|Odd ranks|Launch): *(.*)$", text, re.M))
    words = fields["Launch"].split()
    launcher, nproc = LAUNCHERS[words[0]], int(words[1])
    world, nnodes = (_word_int(words, name) for name in ("world", "nnodes"))
    # A frozen rank still uses a tick or two now and then (gloo's threads, 4 ranks): a few ticks
    # more where init retries to connect. A rank that computes uses ~150 ticks in the 1.5 s.
    waits_in_init = bool(world or nnodes) or "gone" in words
    odd = tuple(int(r) for r in fields["Odd ranks"].split())
    scenario = HangScenario(
        path.stem, path.stem, str(path), fields["Label"], odd, nproc=nproc,
        gone=bool(world) or "gone" in words, launcher=launcher, world=world,
        idle_ticks=6 if waits_in_init else 2, nnodes=nnodes or 1,
    )  # fmt: skip
    held_out = bool(re.search(r"^Held out:", text, re.M))
    return Job(path.stem, fields["Label"], odd, fields["Launch"], scenario, held_out)


def _word_int(words: list[str], name: str) -> int:
    """The number after `name` in a `Launch:` line, or 0."""
    return int(words[words.index(name) + 1]) if name in words[:-1] else 0


def a_rank(launcher: int, script: str) -> int | None:
    """A rank process of the job: the launcher's first child that runs the script or spawn's main."""
    children = sorted((p for p in all_procs().values() if p.ppid == launcher), key=lambda p: p.pid)
    return next((p.pid for p in children if any(script in a or "spawn_main" in a for a in p.argv)), None)


def triage_hang(pid: int) -> tuple[dict[str, Any] | None, float, str]:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "triage", "hang", "--json", "--pid", str(pid)],
        capture_output=True, text=True, cwd=REPO, check=False, timeout=120,
        env={**os.environ, "TRIAGE_HANG_SELF": "1"},
    )  # fmt: skip
    took = time.perf_counter() - started
    try:
        return json.loads(done.stdout), took, ""
    except json.JSONDecodeError:
        return None, took, f"exit {done.returncode}: {done.stderr.strip()[-300:]}"


def verdict(job: Job, data: dict[str, Any] | None) -> tuple[str, tuple[int, ...], bool, bool]:
    """The first entry and the suspect ranks `triage hang` gave, and whether each is right."""
    if not data:
        return "-", (), False, False
    first = data["diagnoses"][0]["id"] if data.get("diagnoses") else "-"
    odd = tuple(data.get("suspect_ranks") or ())
    return first, odd, first == job.label, odd == job.odd


def _ranks(odd: tuple[int, ...]) -> str:
    return ",".join(map(str, odd)) or "-"


def _explain(data: dict[str, Any] | None, error: str) -> None:
    if data is None:
        print(f"      triage hang gave no JSON: {error}")
        return
    print(f"      verdict: {data.get('verdict')}  missing: {data.get('missing_ranks')}")
    for rank in data.get("ranks", []):
        frame = rank.get("user_frame") or {}
        where = f"{Path(frame.get('file', '')).name}:{frame.get('line', '')}" if frame else ""
        print(f"      rank {rank.get('rank')}: {rank.get('state')} {rank.get('collective') or ''} {where}")
    for diagnosis in data.get("diagnoses", [])[:3]:
        print(f"      {diagnosis.get('id')}: {str(diagnosis.get('evidence', ''))[:160]}")


def dump_stacks(job: Job, data: dict[str, Any] | None, directory: Path) -> None:
    """Each rank's `py-spy dump --json --locals` (the ranks `triage hang` found) as `{job}_rank{N}.json`, the
    job's folder written `{SCRIPTS}`, and the script beside them as `{job}.py.txt` (test fixtures)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{job.name}.py.txt").write_text(Path(job.scenario.path).read_text(encoding="utf-8"))
    for rank in (data or {}).get("ranks", []):
        if rank.get("pid") and rank.get("rank") is not None:
            done = subprocess.run(
                [pyspy_binary() or "py-spy", "dump", "--json", "--locals", "--pid", str(rank["pid"])],
                capture_output=True, text=True, check=False, timeout=60,
            )  # fmt: skip
            text = done.stdout.replace(
                str(Path(job.scenario.path).resolve()), "{SCRIPTS}/" + f"{job.name}.py"
            )
            (directory / f"{job.name}_rank{rank['rank']}.json").write_text(text, encoding="utf-8")


def run_job(job: Job, verbose: bool, dump: Path | None = None) -> dict[str, tuple[bool, bool]]:
    """Start the job, read it from the launcher and from a rank; always end it."""
    results: dict[str, tuple[bool, bool]] = {}
    token = ""
    try:
        with hung_job(job.scenario) as hung:
            token = hung.token
            rank = a_rank(hung.launcher_pid, job.scenario.path)
            for via, pid in (("launcher", hung.launcher_pid), ("rank", rank)):
                if pid is None:
                    print(f"  {job.name:<34} {via:<8} no rank process found")
                    results[via] = (False, False)
                    continue
                data, took, error = triage_hang(pid)
                if dump is not None and via == "launcher":
                    dump_stacks(job, data, dump)
                first, odd, entry_ok, odd_ok = verdict(job, data)
                results[via] = (entry_ok, odd_ok)
                mark = "ok" if entry_ok and odd_ok else "WRONG"
                print(
                    f"  {job.name:<34} {via:<8} want {job.label:<4} odd {_ranks(job.odd):<5}"
                    f" got {first:<4} odd {_ranks(odd):<7} {took:5.1f}s  {mark}",
                    flush=True,
                )
                if verbose or not (entry_ok and odd_ok):
                    _explain(data, error)
    except RuntimeError as err:
        print(f"  {job.name:<34} did not hang: {err}")
        results = {"launcher": (False, False), "rank": (False, False)}
    if token and processes_with_token(token):
        print(f"  {job.name}: processes left behind: {processes_with_token(token)}")
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", action="append", default=[], metavar="NAME", help="these jobs only")
    parser.add_argument("-v", "--verbose", action="store_true", help="print each rank's reading")
    parser.add_argument("--dump", type=Path, metavar="DIR", help="write each rank's py-spy dump here")
    args = parser.parse_args()
    jobs = [read_job(p) for p in sorted(JOBS.glob("*.py")) if not args.only or p.stem in args.only]
    print(f"{len(jobs)} hung jobs from {JOBS.relative_to(REPO)}/")
    totals: dict[str, list[tuple[bool, bool]]] = {}
    for job in jobs:
        for via, result in run_job(job, args.verbose, args.dump).items():
            totals.setdefault(via, []).append(result)
            if job.held_out:
                totals.setdefault(f"{via}, held out", []).append(result)
    for via, results in sorted(totals.items()):
        n = len(results) or 1
        entry = sum(e for e, _ in results)
        odd = sum(o for _, o in results)
        both = sum(e and o for e, o in results)
        print(
            f"--pid {via:<18}: entry right {entry}/{len(results)} ({100 * entry / n:.0f} %),"
            f" odd ranks right {odd}/{len(results)} ({100 * odd / n:.0f} %),"
            f" both {both}/{len(results)} ({100 * both / n:.0f} %)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
