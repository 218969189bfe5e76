"""End to end: every failure reproduction runs under real torch (gloo, CPU), its real output goes
through `triage log`, and the diagnosis must name the entry and the rank that failed first.

Each run must end within its bound and leave no process behind: torchrun's workers live in
sessions of their own, so the check looks for every process carrying the run's token.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Callable

import pytest

from tests.conftest import CliResult
from triage.repro import SCENARIOS, Scenario
from triage.repro.runner import processes_with_token, run

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch"),
    pytest.mark.skipif(sys.platform != "linux", reason="clean-up reads /proc"),
]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.id for s in SCENARIOS])
def test_reproduction_is_diagnosed(scenario: Scenario, run_cli: Callable[..., CliResult]) -> None:
    if scenario.missing():
        pytest.skip(f"{scenario.id} needs {', '.join(scenario.missing())}")
    result = run(scenario)
    assert not result.timed_out, f"{scenario.id} ran past its {scenario.bound_s} s bound"
    assert result.duration_s < scenario.bound_s
    assert result.leftover == []
    assert processes_with_token(result.token) == []
    assert result.output.strip(), "the reproduction printed nothing"

    cli = run_cli("log", "--json", "-", stdin=result.output.encode())
    assert cli.returncode == 0, cli.stdout.decode() + cli.stderr.decode() + result.output
    data = json.loads(cli.stdout)
    ids = [d["id"] for d in data["diagnoses"]]
    assert ids[0] == scenario.expect, (ids, result.output)
    for other in scenario.also:
        assert other in ids, (ids, other)
    if scenario.id == "MN5":
        # The killed worker (os._exit) prints nothing itself: the first failure line is either
        # torchrun naming local_rank 1, or torchrun's own restart line, which carries no rank.
        assert data["first_rank"] in (scenario.first_rank, None), (data["first_failure"], result.output)
    elif scenario.first_rank is not None or scenario.launch != "torchrun":
        assert data["first_rank"] == scenario.first_rank, (data["first_failure"], result.output)
    else:
        # every rank fails the same way: the first one named must be one of the job's ranks
        assert data["first_rank"] in (0, 1)
