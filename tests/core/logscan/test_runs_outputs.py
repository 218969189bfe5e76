"""The log engine on the stored real output of eval/runs/ (train split only): failing scripts
written independently of the engine, run under torch 2.13 on CPU/gloo (torchrun, mp.spawn,
python). No torch is launched here; `python bench/bench_runs.py --rerun` captures the output again.

Each test names the mechanism an item shows: a traceback through a frozen module (`<frozen os>`)
prints no source line, so the exception below it is the rank's own error; a rank that fails alone
while torchrun stops the others is the one the others waited for; a DCP load asking for a key the
checkpoint lacks, or a per-rank checkpoint file never written, is a checkpoint that does not fit
the job resuming it; torchrun reporting a failed worker twice (default log level, no "will restart"
line), or whose workers' output goes on after its report with no failure summary, restarted the
group; several ranks' tracebacks alternating line by line (`--tee 3`, every rank
failing at once) are interleaved; ranks whose progress counters count to different totals ran
different numbers of batches; every rank timing out in one collective call, none late, is a call
that does not pair up.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.log_paste import verdict_for
from triage.core.logscan.verdict import Verdict
from triage.core.model import KnowledgeBase

RUNS = Path(__file__).resolve().parents[3] / "eval" / "runs" / "train.yaml"
FLOOR = 0.8  # right first diagnosis (and first rank where the item names one); 82 % when written, 88 % in session 8


def _items() -> list[dict[str, object]]:
    import yaml

    data = yaml.safe_load(RUNS.read_text(encoding="utf-8"))
    assert isinstance(data, list) and data
    return data


def _right(kb: KnowledgeBase, item: dict[str, object], verdict: Verdict) -> bool:
    expect = [str(i) for i in item["expect"]]  # type: ignore[attr-defined]
    accepted = {*expect, *(str(i) for i in item.get("alternates") or [])}  # type: ignore[attr-defined]
    ids = [d.entry_id for d in verdict.diagnoses]
    if expect == ["none"]:
        return not verdict.found or not kb.entries[ids[0]].covered
    rank = item.get("first_rank")
    return verdict.found and bool(ids) and ids[0] in accepted and (rank is None or verdict.first_rank == rank)


def _item(script: str, setting: str = "default") -> dict[str, object]:
    source = f"eval/runs/scripts/{script} ({setting})"
    found = [i for i in _items() if i["source"] == source]
    assert found, f"{source} is not in {RUNS.name}"
    return found[0]


@pytest.mark.parametrize(
    ("script", "entry", "rank"),
    [
        ("spawn_reads_local_rank.py", "D1", None),  # KeyError under `File "<frozen os>"`
        ("rank_fails_before_init.py", "D20", 1),  # rank 1 fails alone; torchrun stops rank 0
        ("dcp_load_new_key.py", "D15", None),  # DCP: Missing key in checkpoint state_dict
        ("resume_per_rank_files.py", "D15", None),  # rank2.pt never written by the 2-rank save
        ("restart_from_step_zero.py", "MN5", 1),  # two failure reports from one torchrun, two worker pids
        ("restart_standalone_resumes.py", "MN5", 1),  # the workers' output goes on after the report
        ("tee_all_ranks_raise.py", "P4", None),  # four ranks' tracebacks alternate line by line
        ("eval_uneven_then_barrier.py", "D9", None),  # progress bars count to 3 on rank 0, 4 on rank 1
        ("gather_dst_mismatch.py", "D19", None),  # both ranks time out in one gather call, none late
    ],
)
def test_real_output_names_the_mistake(kb: KnowledgeBase, script: str, entry: str, rank: int | None) -> None:
    item = _item(script)
    verdict = verdict_for(kb, str(item["log"]))
    got = [(d.entry_id, round(d.score, 2)) for d in verdict.diagnoses[:3]]
    assert verdict.found and verdict.diagnoses[0].entry_id == entry, (script, got)
    if rank is not None:
        assert verdict.first_rank == rank, (script, verdict.first_rank, got)


def test_train_outputs_are_read_right(kb: KnowledgeBase) -> None:
    items = _items()
    misses = []
    for item in items:
        verdict = verdict_for(kb, str(item["log"]))
        if not _right(kb, item, verdict):
            misses.append(
                f"{item['source']}: {[d.entry_id for d in verdict.diagnoses[:3]]} rank {verdict.first_rank}"
            )
    assert 1 - len(misses) / len(items) >= FLOOR, "\n".join(misses)


def test_restart_seen_from_the_launchers_reports(kb: KnowledgeBase) -> None:
    """The restart is read from torchrun's own reports, and what the restarted workers print (a
    connectFullMesh failure) follows it: without the second report there is no restart."""
    log = str(_item("restart_from_step_zero.py")["log"])
    verdict = verdict_for(kb, log)
    restart = verdict.diagnoses[0]
    assert restart.entry_id == "MN5" and "started the group again" in restart.reason
    assert all(d.score < restart.score for d in verdict.diagnoses[1:]), verdict.diagnoses[:3]
    reports = [n for n, line in enumerate(log.splitlines()) if "failed (exitcode" in line]
    assert len(reports) == 2
    first_attempt = "\n".join(log.splitlines()[: reports[0] + 1])
    assert verdict_for(kb, first_attempt).diagnoses[0].entry_id != "MN5"


def test_restart_seen_from_output_resuming_after_the_report(kb: KnowledgeBase) -> None:
    """torchrun at its default level reports the failed worker, then the restarted workers print
    again from step 0 and no failure summary follows: a restart. Cut at the report, or with a
    summary after it, the same log shows no restart."""
    log = str(_item("restart_standalone_resumes.py")["log"])
    verdict = verdict_for(kb, log)
    assert (
        verdict.diagnoses[0].entry_id == "MN5" and "went on after the report" in verdict.diagnoses[0].reason
    )
    lines = log.splitlines()
    report = next(n for n, line in enumerate(lines) if "failed (exitcode" in line)
    cut = "\n".join(lines[: report + 1])
    assert verdict_for(kb, cut).diagnoses[0].entry_id != "MN5"
    summary = "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: "
    gave_up = "\n".join([*lines[: report + 1], summary, *lines[report + 1 :]])
    assert verdict_for(kb, gave_up).diagnoses[0].entry_id != "MN5"
    # under `--tee 3` the restarted workers' output carries torchrun's prefix
    teed = "\n".join([*lines[: report + 1], *(f"[default0]:{line}" for line in lines[report + 1 :])])
    assert verdict_for(kb, teed).diagnoses[0].entry_id == "MN5"
    # the killed workers' tracebacks, flushed after the report, are not output that went on
    trailing = [line for line in lines[:report] if line.startswith("[rank0]:")]
    assert verdict_for(kb, "\n".join([*lines[: report + 1], *trailing, ""])).diagnoses[0].entry_id != "MN5"


def test_every_rank_timing_out_in_one_call_is_a_mismatch_only_when_none_is_missing(kb: KnowledgeBase) -> None:
    """Both ranks time out inside the same gather: neither was late, the calls disagree (D19). With
    rank 1's output gone, rank 0 may just be waiting for a slow or dead rank 1: not D19."""
    log = str(_item("gather_dst_mismatch.py")["log"])
    assert verdict_for(kb, log).diagnoses[0].entry_id == "D19"
    alone = "\n".join(line for line in log.splitlines() if not line.startswith("[rank1]"))
    assert all(
        d.entry_id != "D19" or "every rank timed out" not in d.reason
        for d in verdict_for(kb, alone).diagnoses
    )
