"""The probes by name, the runner that bounds each one, and the link from a fact to its probe.

`LocalProbeRunner` is the ProbeRunner the CLI and the TUI use: it runs a probe in a worker thread,
returns an `error` result when the probe overruns its timeout or is cancelled (the probe sees the
same cancel event and kills its children), and redacts every result. `run_all` runs several at once.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from probes import configs, dist, env, gpu, lint, net, versions
from probes.hang import probe as hang
from probes.subproc import evidence
from triage.core import children
from triage.core.facts import STATUS_ORDER, ProbeOptions, ProbeResult, ProgressCallback, Status
from triage.core.model import KnowledgeBase
from triage.core.redact import redact_text

ProbeFunction = Callable[[ProbeOptions, threading.Event], ProbeResult]


@dataclass(frozen=True)
class ProbeSpec:
    """A probe by name: its title and the function that runs it."""

    name: str
    title: str
    run: ProbeFunction
    key_facts: tuple[str, ...]


PROBES: dict[str, ProbeSpec] = {
    spec.name: spec
    for spec in (
        ProbeSpec("env", "launcher and rank variables", env.probe, env.KEY_FACTS),
        ProbeSpec("gpu", "GPUs, processes, NVLink/NVSwitch, fabric manager", gpu.probe, gpu.KEY_FACTS),
        ProbeSpec("net", "interfaces, MTU, NCCL_SOCKET_IFNAME, master port", net.probe, net.KEY_FACTS),
        ProbeSpec(
            "versions", "python, torch, CUDA, NCCL, accelerate, deepspeed", versions.probe, versions.KEY_FACTS
        ),
        ProbeSpec("configs", "Accelerate config and DeepSpeed JSON", configs.probe, configs.KEY_FACTS),
        ProbeSpec("dist", "torch.distributed mini-test", dist.probe, dist.KEY_FACTS),
        ProbeSpec("lint", "the training script (--script), statically", lint.probe, lint.KEY_FACTS),
        ProbeSpec("hang", "the job running here: every rank's stack and records", hang.probe, hang.KEY_FACTS),
    )
}
# How long a probe may take to stop after its timeout or a cancel, killing its children, before the
# runner kills them itself and reports the overrun anyway.
STOP_GRACE_S = 3.0


def _redacted(result: ProbeResult) -> ProbeResult:
    return replace(
        result,
        summary=redact_text(result.summary),
        evidence=tuple(evidence(e.source, e.output) for e in result.evidence),
    )


class LocalProbeRunner:
    """Runs the probes of this package on this machine, each bounded by options.timeout_s."""

    def __init__(
        self, probes: Mapping[str, ProbeSpec] | None = None, stop_grace_s: float = STOP_GRACE_S
    ) -> None:
        self.probes = dict(probes) if probes is not None else PROBES
        self.stop_grace_s = stop_grace_s

    def run(self, name: str, options: ProbeOptions, cancel: threading.Event) -> ProbeResult:
        spec = self.probes.get(name)
        if spec is None:
            return ProbeResult(
                name, "error", summary=f"unknown probe {name!r} (known: {', '.join(self.probes)})"
            )
        start = time.monotonic()
        stop = threading.Event()  # what the probe sees: the caller's cancel, or our timeout
        box: list[ProbeResult] = []

        def target() -> None:
            try:
                box.append(spec.run(options, stop))
            except Exception as exc:
                box.append(
                    ProbeResult(
                        name,
                        "error",
                        evidence=(evidence("traceback", traceback.format_exc()),),
                        summary=f"the probe failed: {type(exc).__name__}: {exc}",
                    )
                )

        worker = threading.Thread(target=target, name=f"probe-{name}", daemon=True)
        worker.start()
        deadline = start + options.timeout_s
        why = ""
        while worker.is_alive():
            if cancel.is_set():
                why = "cancelled"
            elif time.monotonic() >= deadline:
                why = f"timed out after {options.timeout_s:g}s"
            if why:
                stop.set()
                if cancel.is_set():
                    children.kill_owned(stop)  # the user wants it gone: its processes go at once
                worker.join(self.stop_grace_s)
                if worker.is_alive():
                    # Stuck (importing torch on a loaded machine, a call that ignores the event):
                    # whatever it started dies now, and whatever it starts from now on.
                    children.kill_owned(stop)
                break
            worker.join(min(0.05, max(0.0, deadline - time.monotonic())))
        duration = round(time.monotonic() - start, 4)
        if why and not box:
            return ProbeResult(name, "error", duration_s=duration, summary=f"{why}; the probe did not stop")
        if why:
            # It stopped when told to (its children killed): keep the facts it had, flag the overrun.
            partial = f": {box[0].summary}" if box[0].summary else ""
            return _redacted(replace(box[0], status="error", duration_s=duration, summary=f"{why}{partial}"))
        return _redacted(replace(box[0], duration_s=duration))


def run_all(
    names: Sequence[str],
    options: ProbeOptions,
    on_progress: ProgressCallback | None = None,
    runner: LocalProbeRunner | None = None,
    cancel: threading.Event | None = None,
) -> list[ProbeResult]:
    """Run the named probes concurrently; results come back in the order of `names`.

    on_progress(name, None) is called when a probe starts and on_progress(name, result) when it ends
    (from the probe's thread)."""
    runner = runner or LocalProbeRunner()
    cancel = cancel or threading.Event()
    results: dict[str, ProbeResult] = {}
    lock = threading.Lock()

    def one(name: str) -> None:
        if on_progress is not None:
            on_progress(name, None)
        result = runner.run(name, options, cancel)
        with lock:
            results[name] = result
        if on_progress is not None:
            on_progress(name, result)

    threads = [threading.Thread(target=one, args=(name,), name=f"run-{name}", daemon=True) for name in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [results[name] for name in names]


def worst_status(results: Iterable[ProbeResult]) -> Status:
    """The worst status by STATUS_ORDER (ok < unavailable < warn < fail < error)."""
    worst: Status = "ok"
    for result in results:
        if STATUS_ORDER.index(result.status) > STATUS_ORDER.index(worst):
            worst = result.status
    return worst


def probe_for_fact(kb: KnowledgeBase, fact: str) -> str | None:
    """The probe that reports `fact`, from facts.yaml (None for a fact the catalogue lacks)."""
    known = kb.facts.get(fact)
    return known.probe if known is not None else None


def facts_of_probe(kb: KnowledgeBase, probe: str) -> tuple[str, ...]:
    """The facts in the knowledge base that `probe` reports."""
    return tuple(name for name, fact in kb.facts.items() if fact.probe == probe)


def merged_facts(results: Iterable[ProbeResult]) -> dict[str, object]:
    """Every fact the results established, ready for the walker and triage.core.findings."""
    facts: dict[str, object] = {}
    for result in results:
        facts.update(result.facts)
    return facts


def flagged_facts(results: Iterable[ProbeResult]) -> set[str]:
    """The facts the probes marked abnormal: what triage.core.findings points from."""
    return {name for result in results for name in result.flagged}


def unavailable_facts(kb: KnowledgeBase, results: Iterable[ProbeResult]) -> set[str]:
    """Facts whose probe ran but could not establish them (unavailable, error, or simply omitted):
    the walker falls back to asking for these."""
    missing: set[str] = set()
    for result in results:
        missing.update(f for f in facts_of_probe(kb, result.name) if f not in result.facts)
    return missing
