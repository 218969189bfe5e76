"""Failure reproductions: small real training scripts that fail the way knowledge entries describe.

Each scenario runs real torch (gloo, CPU) under the launcher a user would use, bounded in time by
short collective timeouts and a hard wall-clock limit, and is cleaned up afterwards (see
triage.repro.runner). `triage repro ID` runs one and then diagnoses its output; the tests run
every one and check the diagnosis.
"""

from __future__ import annotations

from triage.repro.catalogue import SCENARIOS
from triage.repro.scenario import HERE, Scenario

__all__ = ["HERE", "SCENARIOS", "Scenario", "find"]


def find(scenario_id: str) -> Scenario | None:
    """The scenario with this id (case and zero padding forgiven), or None."""
    from triage.core.model import normalize_id

    wanted = normalize_id(scenario_id)
    for scenario in SCENARIOS:
        if scenario.id == wanted:
            return scenario
    return None
