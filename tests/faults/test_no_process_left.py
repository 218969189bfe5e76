"""Fault injection: signals at several moments of `probe dist`, `walk` and the app's probes, and
timeouts too short for a loaded machine. After each, nothing triage started may be alive 5 s later,
checked two ways: the process tree snapshotted just before the fault (pid and start time), and
every process carrying the test's marker in its environment (the ranks inherit it)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from tests.faults.processes import Run, marked, start, threads, wait_until
from tests.faults.terminal import Terminal

pytestmark = [pytest.mark.slow, pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")]

HANG = {"TRIAGE_DIST_FAULT": "1:sleep@barrier"}  # rank 1 sleeps at the barrier: a real hang
WALK_TO_DIST = b"2\n1\n3\n"  # hangs at start-up > one machine > launched with torchrun: the mini-test
LEFT_WITHIN_S = 5.0


def _ranks_up(run: Run, within_s: float = 30.0) -> None:
    assert wait_until(lambda: len(marked(run.marker, ranks_only=True)) >= 2, within_s), (
        "the ranks never started"
    )
    run.snapshot()


def _reach(run: Run, moment: str) -> None:
    """Wait for a moment of the mini-test: `starting` (the probe threads have started; the ranks
    may not have), `ranks` (the ranks have just been spawned), `hung` (rank 1 asleep at the barrier)."""
    if moment == "starting":
        assert wait_until(lambda: threads(run.proc.pid) > 1, 30.0), "the probes never started"
        run.snapshot()
        return
    _ranks_up(run)
    if moment == "hung":
        time.sleep(2.0)
        run.snapshot()


def _assert_nothing_left(run: Run) -> None:
    tree, environment = run.leftovers(LEFT_WITHIN_S)
    assert not tree, f"processes of triage's tree still alive after {LEFT_WITHIN_S:g}s: {sorted(tree)}"
    assert not environment, f"processes carrying the test's marker still alive: {environment}"


@pytest.fixture
def runs(marker: str) -> Iterator[list[Run]]:
    started: list[Run] = []
    yield started
    for run in started:
        run.cleanup()


EXIT_FOR = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGKILL: -signal.SIGKILL}


@pytest.mark.parametrize("moment", ["starting", "ranks", "hung"])
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_probe_dist_interrupted(signum: int, moment: str, marker: str, runs: list[Run]) -> None:
    run = start(marker, "probe", "dist", "--timeout", "20", **HANG)
    runs.append(run)
    _reach(run, moment)
    run.signal(signum)
    _, err = run.proc.communicate(timeout=30)  # generous: a loaded 2-core CI machine
    assert run.proc.returncode == EXIT_FOR[signum], err
    assert err.decode().strip().splitlines()[-1].startswith("triage: "), err
    _assert_nothing_left(run)


def test_probe_dist_killed_outright(marker: str, runs: list[Run]) -> None:
    """SIGKILL cannot be handled: the ranks' parent-death signal and watchdog end them."""
    run = start(marker, "probe", "dist", "--timeout", "20", **HANG)
    runs.append(run)
    _reach(run, "hung")
    run.signal(signal.SIGKILL)
    run.proc.wait(timeout=5)
    _assert_nothing_left(run)


# Ctrl-C during a probe skips it and asks instead; stdin then ends: a one-line error, exit 2.
WALK_EXIT_FOR = {signal.SIGINT: 2, signal.SIGTERM: 143}


@pytest.mark.parametrize("moment", ["ranks", "hung"])
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_walk_interrupted_during_its_probe(signum: int, moment: str, marker: str, runs: list[Run]) -> None:
    run = start(marker, "walk", "--probe-timeout", "20", stdin=WALK_TO_DIST, **HANG)
    runs.append(run)
    _reach(run, moment)
    run.signal(signum)
    _, err = run.proc.communicate(timeout=30)  # generous: a loaded 2-core CI machine
    assert run.proc.returncode == WALK_EXIT_FOR[signum], err
    _assert_nothing_left(run)


@pytest.fixture
def app(marker: str) -> Iterator[Terminal]:
    terminal = Terminal(marker, "--probe-timeout", "20", **HANG)
    yield terminal
    terminal.close()


def _app_at_dist_probe(app: Terminal, moment: str = "ranks") -> None:
    assert app.wait_for("What do you see"), bytes(app.screen[-2000:])
    for key, next_prompt in (("2", "How many machines"), ("1", "How was it started"), ("3", "mini-test")):
        app.press(key)
        assert app.wait_for(next_prompt), bytes(app.screen[-2000:])
    _reach(app.run, moment)


@pytest.mark.parametrize(
    ("how", "moment"),
    [
        ("SIGINT", "ranks"),
        ("SIGINT", "hung"),
        ("SIGTERM", "ranks"),
        ("SIGTERM", "hung"),
        ("SIGHUP", "ranks"),
        ("q", "ranks"),
    ],
    ids=["SIGINT-ranks", "SIGINT-hung", "SIGTERM-ranks", "SIGTERM-hung", "SIGHUP-ranks", "q-ranks"],
)
def test_app_ended_during_a_probe(how: str, moment: str, app: Terminal) -> None:
    _app_at_dist_probe(app, moment)
    if how == "q":
        app.run.snapshot()
        app.press("q")
    else:
        app.run.signal(getattr(signal, how))
    app.run.proc.wait(timeout=15)
    _assert_nothing_left(app.run)


def test_app_escape_cancels_the_probe_and_its_ranks(app: Terminal) -> None:
    _app_at_dist_probe(app)
    ranks = marked(app.run.marker, ranks_only=True)
    app.press("\x1b")
    assert wait_until(lambda: not set(ranks) & set(marked(app.run.marker)), LEFT_WITHIN_S)
    assert app.run.proc.poll() is None, "the app itself keeps running"


@pytest.fixture
def loaded_cpus() -> Iterator[None]:
    """Every core busy, so that a probe misses its deadline the way it does on a loaded node."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(max(2, _cores()))]
    yield
    for spinner in spinners:
        spinner.kill()
        spinner.wait()


def _cores() -> int:
    import os

    return len(os.sched_getaffinity(0))


@pytest.mark.parametrize(
    "args",
    [("dist", "--timeout", "0.1"), ("--timeout", "1")],
    ids=["dist-0.1s", "all-1s"],
)
def test_short_timeouts_under_cpu_load(args: tuple[str, ...], marker: str, loaded_cpus: None) -> None:
    run = start(marker, "probe", *args)
    try:
        deadline = time.monotonic() + 30
        while run.proc.poll() is None and time.monotonic() < deadline:
            run.snapshot()  # catch the ranks while they live
            time.sleep(0.05)
        _, err = run.proc.communicate(timeout=5)
        assert run.proc.returncode in (0, 4, 5), err
        _assert_nothing_left(run)
    finally:
        run.cleanup()
