"""Every reproduction, in every setting it runs in, gets the right first diagnosis and first failing
rank: checked on the real output each run printed (tests/repro/data/outputs.tar.gz, written by
`python -m triage.repro.harvest`), so the whole matrix is checked without rerunning torch.
test_log_repro.py runs the reproductions live.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from triage.core.logscan.patterns import compile_signatures
from triage.core.logscan.scanner import Scanner
from triage.core.logscan.verdict import Verdict, decide
from triage.core.model import KnowledgeBase
from triage.repro import Scenario
from triage.repro.harvest import folder, read_archive, runs
from triage.repro.settings import Setting

ARCHIVE = Path(__file__).resolve().parent / "data" / "outputs.tar.gz"
HARVESTED = read_archive(ARCHIVE)
RUNS = list(runs())


def diagnose(kb: KnowledgeBase, files: list[tuple[str, str]]) -> Verdict:
    scanner = Scanner(compile_signatures(kb))
    for name, text in files:
        scanner.feed_block(scanner.source(name), text.encode(), 1)
    return decide(scanner.scan, kb)


def check(scenario: Scenario, verdict: Verdict, output: str) -> None:
    """The diagnosis a reproduction must get, whatever the setting."""
    assert verdict.found, output
    ids = [d.entry_id for d in verdict.diagnoses]
    assert ids[0] == scenario.expect, (ids, output)
    for other in scenario.also:
        assert other in ids[:4], (ids, other)
    if scenario.first_rank is not None or not scenario.ranked:
        assert verdict.first_rank == scenario.first_rank, (verdict.first, output)
    else:  # every rank fails the same way: the first one named must be one of the job's ranks
        assert verdict.first_rank in (0, 1), (verdict.first, output)


def test_every_scenario_and_setting_was_harvested() -> None:
    # a scenario that needs a package this machine lacks could not have been harvested here either
    wanted = {folder(scenario, setting) for scenario, setting in RUNS if not scenario.missing()}
    assert wanted <= set(HARVESTED), (
        f"run `python -m triage.repro.harvest {ARCHIVE}` for {sorted(wanted - set(HARVESTED))}"
    )


@pytest.mark.parametrize(("scenario", "setting"), RUNS, ids=[folder(s, t) for s, t in RUNS])
def test_harvested_output_is_diagnosed(kb: KnowledgeBase, scenario: Scenario, setting: Setting) -> None:
    if folder(scenario, setting) not in HARVESTED and scenario.missing():
        pytest.skip(f"{scenario.id} needs {', '.join(scenario.missing())}")
    files = HARVESTED[folder(scenario, setting)]
    check(scenario, diagnose(kb, files), "\n".join(text for _, text in files)[-6000:])
