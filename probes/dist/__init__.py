"""The dist probe: the torch.distributed mini-test, on this machine or across nodes.

`probe` runs it locally (probes.dist.local) within the options' timeout; `python -m probes.dist`
runs the same worker under torchrun or srun across nodes (probes.dist.worker), where rank 0 gathers
every rank's host, GPUs, NICs, versions and NCCL settings and reports the differences. torch is
imported only when a test actually runs.
"""

from __future__ import annotations

import threading

from triage.core.facts import Evidence, ProbeOptions, ProbeResult, Status
from probes.subproc import evidence

NAME = "dist"
KEY_FACTS = ("dist.minitest", "dist.missing_ranks", "dist.bus_bandwidth_gbps")


def timeouts(options: ProbeOptions) -> tuple[float, float]:
    """(hang timeout, overall deadline) for a probe budget: a step may stall for half the budget,
    and the whole test must end a little before the budget so the report is not cut off."""
    stall = max(1.0, options.timeout_s / 2)
    return stall, max(stall + 0.5, options.timeout_s - 1.0)


def probe(options: ProbeOptions, cancel: threading.Event) -> ProbeResult:
    """The local mini-test as a probe result."""
    from probes.dist.local import Unavailable, run_minitest
    from probes.dist.report import facts, format_text

    stall, deadline = timeouts(options)
    try:
        outcome = run_minitest(stall_timeout_s=stall, deadline_s=deadline, cancel=cancel)
    except Unavailable as exc:
        return ProbeResult(NAME, "unavailable", summary=str(exc))
    if outcome.result == "cancelled":
        return ProbeResult(NAME, "error", summary="cancelled")
    found = facts(outcome)
    status: Status = "ok"
    if outcome.result != "ok":
        status = "fail"
    elif found.get("dist.cross_rank_mismatch"):
        status = "warn"
    proof: tuple[Evidence, ...] = (
        evidence(
            f"mini-test: {outcome.world_size} local ranks on {outcome.backend} (python -m probes.dist)",
            format_text(outcome),
        ),
    )
    flagged = [
        name
        for name, bad in (
            ("dist.minitest", outcome.result != "ok"),
            ("dist.missing_ranks", bool(outcome.missing)),
            ("dist.cross_rank_mismatch", found.get("dist.cross_rank_mismatch") is True),
        )
        if bad
    ]
    return ProbeResult(NAME, status, found, proof, summary=outcome.reason, flagged=tuple(flagged))
