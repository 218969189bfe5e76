"""Environment dumps and issue-template lines carry no evidence of the failure (triage.core.boilerplate).

The dumps are real output: `python -m torch.utils.collect_env` and `accelerate env` run on this
machine, and the system-info block of a real accelerate issue (#3512)."""

from __future__ import annotations

from pathlib import Path

import pytest

from triage.core.boilerplate import drop_boilerplate
from triage.core.matcher import index_for, rank
from triage.core.model import KnowledgeBase

REPORTS = Path(__file__).resolve().parent.parent / "fixtures" / "reports"
COLLECT_ENV = (REPORTS / "collect_env_cpu.txt").read_text(encoding="utf-8")
ACCELERATE_ENV = (REPORTS / "accelerate_env.txt").read_text(encoding="utf-8")
ISSUE = (REPORTS / "accelerate_issue_3512.txt").read_text(encoding="utf-8")


def _kept(text: str) -> list[str]:
    return [line.strip() for line in drop_boilerplate(text).splitlines() if line.strip()]


def test_collect_env_output_leaves_no_line_of_its_own() -> None:
    assert "PyTorch version:" in COLLECT_ENV and "Versions of relevant libraries:" in COLLECT_ENV
    assert _kept(COLLECT_ENV) == []


def test_accelerate_env_output_and_its_config_block_go() -> None:
    assert _kept(ACCELERATE_ENV) == []
    kept = _kept(ISSUE)
    assert kept[0] == "NCCL timeout when try to save"
    assert not any("mixed_precision" in line or "machine_rank" in line or "version" in line for line in kept)
    assert not any("My own modified scripts" in line for line in kept)


def test_the_dump_would_otherwise_be_words_the_knowledge_knows(kb: KnowledgeBase) -> None:
    index = index_for(kb)
    known = [t for t in index.normalizer.tokens(ISSUE) if index.posting(t) is not None]
    assert len(known) >= 10  # without the filter these would count as symptoms


@pytest.mark.parametrize(
    "line",
    [
        "I'm using NCCL version 2.21.5+cuda12.4, nvidia-driver: 550.54.15 on both nodes",
        "sft微调NCCL报错. llamafactory version: 0.7.2.dev0",
        "Error: NCCL version mismatch between the nodes",
        "GPU available: True, used: True",
        "- [x] I set NCCL_P2P_DISABLE=1 and it still hangs",
    ],
)
def test_the_posters_own_lines_stay(line: str) -> None:
    assert _kept(f"title\n{line}") == ["title", line]


def test_template_headings_and_code_fences_go_and_the_code_stays() -> None:
    text = "title\n### 🐛 Describe the bug\nhangs\n**To Reproduce**\n```python\ndist.barrier()\n```\n### NCCL hangs"
    assert _kept(text) == ["title", "hangs", "dist.barrier()", "### NCCL hangs"]


def test_torchruns_own_failure_report_goes_and_the_workers_error_stays() -> None:
    # torchrun 2.13's report and summary as it prints them (eval/runs), around the worker's error
    text = """ValueError: the batch has 3 samples, expected 4
E1122 20:22:40.079000 3559 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1) local_rank: 0 (pid: 3645) of binary: /work/main/.venv/bin/python
Failures:
  <NO_OTHER_FAILURES>
Root Cause (first observed failure):
[0]:
  time      : 2026-11-22_20:22:40
  host      : worker-3
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 3645)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"""
    assert _kept(text) == ["ValueError: the batch has 3 samples, expected 4", "[0]:"]


def test_a_template_placeholder_goes_and_its_line_stays() -> None:
    text = "hangs on two nodes\n - GPU count and types [e.g. two machines with x8 A100s each] 2x8 H100"
    assert _kept(text) == ["hangs on two nodes", "- GPU count and types  2x8 H100"]


@pytest.mark.parametrize(
    "title",
    [
        "Training hangs at the end of the epoch with DDP",
        "NCCL timeout when try to save",
        "RuntimeError: Address already in use when I start a second torchrun",
    ],
)
def test_a_pasted_environment_does_not_move_the_answer(kb: KnowledgeBase, title: str) -> None:
    alone = rank(kb, title, top=3)
    pasted = rank(kb, f"{title}\n\n{COLLECT_ENV}\n{ISSUE.split(chr(10), 1)[1]}", top=3)
    assert alone.best is not None and pasted.best is not None
    assert pasted.best.entry.id == alone.best.entry.id


def test_a_dump_flattened_into_one_line_loses_its_settings_not_the_sentence() -> None:
    # the accelerate issue's lines run together as an excerpt (or a paste without newlines) holds them
    flattened = " - ".join(line.strip().lstrip("- ") for line in ISSUE.splitlines() if line.strip())
    assert "\n" not in flattened and "mixed_precision" in flattened
    kept = drop_boilerplate(flattened)
    assert kept.startswith("NCCL timeout when try to save")
    assert "mixed_precision" not in kept and "machine_rank" not in kept


def test_one_dash_and_one_colon_in_a_sentence_keep_it_whole() -> None:
    sentence = "training hangs - torch version: 2.1 on two nodes"
    assert drop_boilerplate(sentence) == sentence
    run_on = (
        "- `Accelerate` version: 0.15.0 - Python version: 3.8.0 - Platform: Linux - freezes at step 10 of 100"
    )
    assert drop_boilerplate(run_on) == "freezes at step 10 of 100"
