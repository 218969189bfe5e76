"""The lint probe on real scripts: findings become catalogued facts, flagged by severity; no script or
an unreadable one leaves it unavailable; a shell launch script leads to the script it starts."""

from __future__ import annotations

import threading
from pathlib import Path

from probes import lint
from probes.registry import LocalProbeRunner
from triage.core.facts import ProbeOptions, ProbeResult
from triage.core.findings import findings
from triage.core.model import KnowledgeBase

FIXTURES = Path(__file__).resolve().parent.parent / "core" / "lint" / "fixtures"


def probe(script: Path | None) -> ProbeResult:
    return lint.probe(ProbeOptions(script=str(script) if script else None), threading.Event())


def test_without_a_script_the_probe_is_unavailable() -> None:
    result = probe(None)
    assert result.status == "unavailable" and result.facts == {} and "--script" in result.summary


def test_findings_become_facts_of_the_catalogue(kb: KnowledgeBase) -> None:
    result = probe(FIXTURES / "TRG021_fail.py")
    assert result.status == "fail"
    assert result.facts["lint.rank_conditional_collective"] is True
    assert result.facts["lint.every_rank_writes"] is False
    assert result.facts["lint.findings"] == 3 and result.facts["lint.distributed"] is True
    assert result.flagged == ("lint.rank_conditional_collective",)
    assert "TRG021 [D21] x3" in result.summary and "TRG021" in result.evidence[0].output
    lint_facts = {name for name, fact in kb.facts.items() if fact.probe == "lint"}
    assert set(result.facts) == lint_facts
    assert [f.entry_id for f in findings(result.facts, kb, result.flagged)] == ["D21"]


def test_a_clean_script_sets_every_fact_false() -> None:
    result = probe(FIXTURES / "TRG021_pass.py")
    assert result.status == "ok" and result.flagged == ()
    assert not any(v for k, v in result.facts.items() if k not in ("lint.distributed", "lint.findings"))


def test_info_findings_set_facts_without_flagging_them() -> None:
    result = probe(FIXTURES / "TRG040_fail.py")
    assert result.status == "ok" and result.facts["lint.default_collective_timeout"] is True
    assert result.flagged == ()


def test_a_shell_launch_script_leads_to_its_training_script(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(
        "import torch.distributed as dist\nfor step in range(9):\n    step_fn(step)\n"
    )
    (tmp_path / "run.sh").write_text("torchrun --nproc-per-node=8 --max-restarts=2 train.py\n")
    result = probe(tmp_path / "run.sh")
    assert (
        result.facts["lint.restarts_without_resume"] is True
        and result.facts["lint.loads_checkpoint"] is False
    )
    assert result.status == "warn" and "train.py" in result.summary


def test_a_script_that_is_not_python_leaves_the_probe_unavailable(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("def f(:\n")
    result = probe(tmp_path / "train.py")
    assert result.status == "unavailable" and "train.py:1: syntax error" in result.summary
    assert probe(tmp_path / "missing.py").status == "unavailable"


def test_the_runner_runs_it_by_name() -> None:
    result = LocalProbeRunner().run(
        "lint", ProbeOptions(script=str(FIXTURES / "TRG022_fail.py")), threading.Event()
    )
    assert result.facts["lint.sampler_without_set_epoch"] is True and result.status == "warn"
