"""End to end: every failure reproduction runs under real torch (gloo, CPU), its real output goes
through `triage log`, and the diagnosis must name the entry and the rank that failed first.

Every reproduction but a few (HARVESTED_ONLY) runs live in the default setting; the diverged rank (D20, whose first failing
rank the settings change most: an abort after the exception under --tee, the rank files of
--log-dir) also runs in every other setting: debug variables, `--tee 3`, `--log-dir` (the per-rank
files go to `triage log` as separate files), a collector's timestamps. test_repro_outputs.py checks every
scenario in every setting on their harvested output, at no torch cost.

Each run must end within its bound and leave no process behind: torchrun's workers live in
sessions of their own, so the check looks for every process carrying the run's token.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import CliResult
from triage.repro import SCENARIOS, Scenario
from triage.repro.runner import processes_with_token, run
from triage.repro.settings import DEFAULT, Setting

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch"),
    pytest.mark.skipif(sys.platform != "linux", reason="clean-up reads /proc"),
]


MATRIX = ("D20",)  # run live in every setting; the others in the default one (all: test_repro_outputs.py)
# Checked on their harvested output only (test_repro_outputs.py), to keep CI within its time: each
# live run starts real torch processes on a loaded 2-core machine.
HARVESTED_ONLY = frozenset(
    {
        "D1-WORLD",
        "D13",
        "D14",
        "D20-ACCELERATE",
        "D1-RANK",
        "D1-SPAWN",
        "D4-SPAWN",
        "D19-GATHER",
        "D20-BACKWARD",
        "D20-SPAWN-SURVIVOR",
        "E9-SPAWN",
        "MN3-SHELL",
        "P1-CLIENT",
        "P4-SPAWN",
        "X1-CPU",
    }
)
LIVE = [(s, DEFAULT) for s in SCENARIOS if s.id not in HARVESTED_ONLY] + [
    (s, t) for s in SCENARIOS if s.id in MATRIX for t in s.settings() if t is not DEFAULT
]


@pytest.mark.parametrize(("scenario", "setting"), LIVE, ids=[f"{s.id}--{t.name}" for s, t in LIVE])
def test_reproduction_is_diagnosed(
    scenario: Scenario, setting: Setting, run_cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    if scenario.missing():
        pytest.skip(f"{scenario.id} needs {', '.join(scenario.missing())}")
    result = run(scenario, setting=setting)
    assert not result.timed_out, f"{scenario.id} ran past its {scenario.bound_s} s bound"
    assert result.duration_s < scenario.bound_s
    assert result.leftover == []
    assert processes_with_token(result.token) == []
    assert result.output.strip(), "the reproduction printed nothing"
    if setting.log_dir:
        assert result.files, "--log-dir wrote no per-rank files"

    paths = []
    for name, text in result.sources():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        paths.append(str(path))
    cli = run_cli("log", "--json", *paths)
    output = "\n".join(text for _, text in result.sources())
    assert cli.returncode == 0, cli.stdout.decode() + cli.stderr.decode() + output
    data = json.loads(cli.stdout)
    ids = [d["id"] for d in data["diagnoses"]]
    if ids[0] != scenario.expect:
        pytest.fail(f"diagnosed {ids}, expected {scenario.expect}\n{_telling(output)}", pytrace=False)
    for other in scenario.also:
        assert other in ids, (ids, other)
    if scenario.first_rank is not None or not scenario.ranked:
        if data["first_rank"] != scenario.first_rank:
            pytest.fail(
                f"first rank {data['first_rank']}, expected {scenario.first_rank}\n{_telling(output)}",
                pytrace=False,
            )
    else:
        # every rank fails the same way: the first one named must be one of the job's ranks
        assert data["first_rank"] in (0, 1)


def _telling(output: str, most: int = 40) -> str:
    """The lines of a run's output that decide a diagnosis (errors, exits, the launcher's summary),
    short enough that a CI report shows them whole when a live run comes out differently."""
    keep = re.compile(
        r"error|exception|exitcode|signal|failures|root cause|rank\s*:|closed|reset|timeout", re.I
    )
    lines = [line[:200] for line in output.splitlines() if keep.search(line) and 'File "' not in line]
    return "\n".join(lines[-most:])
