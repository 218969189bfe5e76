"""The runner (timeouts, cancel, errors, redaction), run_all, and the probes against the fact catalogue."""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest

from probes.registry import (
    PROBES,
    LocalProbeRunner,
    ProbeSpec,
    facts_of_probe,
    flagged_facts,
    merged_facts,
    probe_for_fact,
    run_all,
    unavailable_facts,
    worst_status,
)
from probes.subproc import run_command
from tests.probes.helpers import MARKER_ENV, marked_pids, wait_gone
from triage.core.facts import Evidence, ProbeOptions, ProbeResult
from triage.core.model import KnowledgeBase
from triage.core.walker import walk


def sleeper(marker: str) -> ProbeSpec:
    def run(options: ProbeOptions, cancel: threading.Event) -> ProbeResult:
        # `sh` starts `sleep` as its own child: the whole session has to go, not only the shell.
        result = run_command(
            ["sh", "-c", "sleep 30; echo done"],
            timeout_s=60,
            cancel=cancel,
            env={**os.environ, MARKER_ENV: marker},
        )
        return ProbeResult("slow", "ok", {"env.launcher": "none"}, summary=result.describe())

    return ProbeSpec("slow", "sleeps", run, ())


def test_timeout_kills_the_probe_children(marker: str) -> None:
    runner = LocalProbeRunner({"slow": sleeper(marker)})
    started = time.monotonic()
    result = runner.run("slow", ProbeOptions(timeout_s=0.5), threading.Event())
    assert time.monotonic() - started < 8.0  # far below the 30 s sleep: slack for a loaded machine
    assert result.status == "error"
    assert result.summary == "timed out after 0.5s: cancelled (killed)"
    assert result.facts == {"env.launcher": "none"}  # what it had established is kept
    assert wait_gone(marker) == []


def test_cancel_stops_a_running_probe_promptly(marker: str) -> None:
    runner = LocalProbeRunner({"slow": sleeper(marker)})
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    started = time.monotonic()
    result = runner.run("slow", ProbeOptions(timeout_s=30), cancel)
    assert time.monotonic() - started < 8.0
    assert result.status == "error" and result.summary.startswith("cancelled")
    assert wait_gone(marker) == []


def test_command_timeout_inside_a_probe(marker: str) -> None:
    result = run_command(["sh", "-c", "sleep 30"], timeout_s=0.3, env={**os.environ, MARKER_ENV: marker})
    assert result.timed_out and result.returncode is None and "timed out after" in result.describe()
    assert marked_pids(marker) == []
    missing = run_command(["no-such-command-here"], timeout_s=1)
    assert missing.error == "no-such-command-here: not installed"


def test_a_probe_that_ignores_its_stop_event() -> None:
    def stubborn(options: ProbeOptions, cancel: threading.Event) -> ProbeResult:
        time.sleep(1.0)
        return ProbeResult("stubborn", "ok")

    runner = LocalProbeRunner({"stubborn": ProbeSpec("stubborn", "", stubborn, ())}, stop_grace_s=0.1)
    result = runner.run("stubborn", ProbeOptions(timeout_s=0.2), threading.Event())
    assert result.status == "error" and result.summary == "timed out after 0.2s; the probe did not stop"


def test_errors_and_secrets() -> None:
    token = "hf_" + "Z" * 24

    def broken(options: ProbeOptions, cancel: threading.Event) -> ProbeResult:
        raise RuntimeError("boom")

    def leaky(options: ProbeOptions, cancel: threading.Event) -> ProbeResult:
        return ProbeResult(
            "leaky", "ok", evidence=(Evidence("env", f"HF_TOKEN={token}"),), summary=f"saw {token}"
        )

    runner = LocalProbeRunner(
        {"broken": ProbeSpec("broken", "", broken, ()), "leaky": ProbeSpec("leaky", "", leaky, ())}
    )
    failed = runner.run("broken", ProbeOptions(), threading.Event())
    assert failed.status == "error" and failed.summary == "the probe failed: RuntimeError: boom"
    assert "RuntimeError: boom" in failed.evidence[0].output
    clean = runner.run("leaky", ProbeOptions(), threading.Event())
    assert token not in clean.summary and token not in clean.evidence[0].output
    assert runner.run("nope", ProbeOptions(), threading.Event()).status == "error"


def test_run_all_is_concurrent_and_reports_progress() -> None:
    barrier = threading.Barrier(3, timeout=5)

    def meet(options: ProbeOptions, cancel: threading.Event) -> ProbeResult:
        barrier.wait()  # only passes when all three run at once
        return ProbeResult("x", "ok")

    specs = {n: ProbeSpec(n, "", meet, ()) for n in ("a", "b", "c")}
    events: list[tuple[str, str | None]] = []
    lock = threading.Lock()

    def progress(name: str, result: ProbeResult | None) -> None:
        with lock:
            events.append((name, None if result is None else result.status))

    results = run_all(["c", "a", "b"], ProbeOptions(), progress, LocalProbeRunner(specs))
    assert [r.status for r in results] == ["ok"] * 3
    for name in "abc":
        assert events.index((name, None)) < events.index((name, "ok"))
    assert worst_status([*results, ProbeResult("w", "warn"), ProbeResult("u", "unavailable")]) == "warn"
    assert worst_status([ProbeResult("u", "unavailable")]) == "unavailable"


def test_the_probes_report_only_catalogued_facts_of_the_right_type(kb: KnowledgeBase) -> None:
    assert set(PROBES) == {fact.probe for fact in kb.facts.values()}
    results = run_all(["env", "gpu", "net", "configs", "versions"], ProbeOptions(timeout_s=60))
    for result in results:
        assert result.status != "error", result
        for name, value in result.facts.items():
            fact = kb.facts[name]
            assert fact.probe == result.name == probe_for_fact(kb, name)
            expected = {"bool": bool, "int": int, "float": float, "string": str, "list": list, "enum": str}[
                fact.type
            ]
            assert isinstance(value, expected) and (fact.type == "int") <= (not isinstance(value, bool)), name
            if fact.type == "enum":
                assert value in fact.values, (name, value)
        assert set(result.flagged) <= set(result.facts)
    facts = merged_facts(results)
    assert facts["env.launcher"] == "none"
    missing = unavailable_facts(kb, results)
    assert "dist.minitest" not in missing  # dist did not run, so nothing is claimed about it
    assert set(facts_of_probe(kb, "env")) >= {"env.launcher", "env.rank_contract"}
    if facts.get("gpu.available") is False:
        assert "gpu.all_ranks_on_gpu0" in missing and "gpu.count" not in missing
    assert flagged_facts(results) <= set(facts)


def test_the_walker_branches_on_a_probe_fact(kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        monkeypatch.setenv("MASTER_PORT", str(taken.getsockname()[1]))
        results = run_all(["net"], ProbeOptions())
    answers = {"what_do_you_see": "1", "launch_error": "1"}  # "won't start" -> "Address already in use"
    position = walk(kb, answers, merged_facts(results), unavailable_facts(kb, results))
    assert position.leaf is not None and position.leaf.id == "D4"
    assert position.trail[-1].via == "fact" and position.trail[-1].answer == "false"
