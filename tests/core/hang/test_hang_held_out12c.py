"""The hang analysis on the real stacks of session 12c's held-out hung jobs (eval/hangs/w_*.py, read
by bench/bench_hang_unseen.py --dump): py-spy's dumps of every rank that runs, torch 2.13, gloo."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

import tests.core.hang.test_hang_unseen_stacks as unseen
from probes.hang.pyspy import parse_dump
from tests.core.hang.test_hang_held_out12 import _variant
from tests.core.hang.test_hang_unseen_stacks import _job, _rank, _says
from triage.core.hang.analyse import analyse
from triage.core.hang.loop_exits import empty_batch_test
from triage.core.hang.p2p import crossed_peers
from triage.core.hang.stacks import RankSample


def test_a_step_skipped_on_an_empty_batch_is_a_shard_out_of_data() -> None:
    """`if len(x) == 0: continue` on the last step of a hand-split eval: rank 2 skipped that step's
    all_reduce and waits in the barrier after the loop (read D19 before: a decision of its own)."""
    picture = _job("w_d9_eval_last_batch_empty_skip", "python")
    assert [d.entry for d in picture.diagnoses][:2] == ["D9", "D19"], _says(picture)
    assert picture.suspect_ranks == (2,)
    assert "batch was empty" in picture.diagnoses[0].evidence[0]


def test_a_step_skipped_on_a_flag_stays_a_decision_of_the_rank(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _variant(tmp_path, monkeypatch, "w_d9_eval_last_batch_empty_skip", 40, "if rank == 2 and step == 1:")
    picture = _job("w_d9_eval_last_batch_empty_skip", "python")
    assert picture.diagnoses[0].entry != "D9", _says(picture)


@pytest.mark.parametrize(
    ("test", "empty"),
    [
        ("len(x) == 0", True),
        ("len(batch['input_ids']) < 1", True),
        ("not len(batch)", True),
        ("x.numel() == 0", True),
        ("images.shape[0] == 0", True),
        ("len(x) == 10", False),
        ("loss.isnan()", False),
        ("step == 0", False),
    ],
)
def test_empty_batch_tests(test: str, empty: bool) -> None:
    assert empty_batch_test(test) is empty


def test_an_error_swallowed_by_a_callback_runner_leaves_that_rank_a_lap_ahead() -> None:
    """`for cb in self.callbacks: try: cb.on_epoch_end() except Exception: log.exception(...)`:
    rank 0 waits in the barrier of the checkpoint callback, rank 1 (whose shard write raised) in
    the next epoch's gradient all_reduce (read before: rank 0 issued it again in a retry loop)."""
    picture = _job("w_d19_on_epoch_end_error_logged")
    assert [d.entry for d in picture.diagnoses][:2] == ["D19", "D20"], _says(picture)
    assert picture.suspect_ranks == (1,)
    assert "CallbackList.on_epoch_end" in picture.verdict


def test_a_counted_retry_loop_around_the_same_call_is_still_a_retry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _variant(tmp_path, monkeypatch, "w_d19_on_epoch_end_error_logged", 54, "for cb in range(3):")
    picture = _job("w_d19_on_epoch_end_error_logged")
    assert picture.suspect_ranks == (0,) and "retry loop" in picture.verdict, _says(picture)


def _with_peers(job: str, world: int) -> list[RankSample]:
    samples = []
    for r in range(world):
        text = (unseen.DUMPS / f"{job}_rank{r}.json").read_text(encoding="utf-8")
        p2p = parse_dump(text.replace("{SCRIPTS}", str(unseen.DUMPS)), 100 + r, rank_of=True).p2p
        samples.append(replace(_rank(job, r, world), p2p=p2p))
    return samples


def test_a_recv_naming_another_source_than_the_rank_sending_to_it_is_the_odd_one() -> None:
    """Rank 0 waits in recv(src=1) for the loss the last stage (rank 2) sends it with
    send(dst=0); rank 1 waits in recv(src=0) (read D21 with rank 2 before, from the stacks alone)."""
    samples = _with_peers("w_d19_pipeline_recv_wrong_src", 3)
    assert [s.p2p for s in samples] == [("recv", 1), ("recv", 0), ("send", 0)]
    assert crossed_peers(samples) == [(0, 1, 2)]
    picture = analyse(samples)
    assert [d.entry for d in picture.diagnoses][:2] == ["D19", "D21"], _says(picture)
    assert picture.suspect_ranks == (0,)
    assert "recv(src=1)" in picture.diagnoses[0].evidence[0]


def test_peers_that_pair_name_nobody() -> None:
    samples = _with_peers("w_d19_pipeline_recv_wrong_src", 3)
    paired = [replace(samples[0], p2p=("recv", 2)), *samples[1:]]
    assert crossed_peers(paired) == []
    without = [replace(s, p2p=None) for s in samples]
    assert (
        crossed_peers(without) == []
        and not parse_dump(
            (unseen.DUMPS / "w_d19_pipeline_recv_wrong_src_rank0.json").read_text(encoding="utf-8"), 100
        ).p2p
    )


def test_the_batch_read_as_before() -> None:
    """The jobs of the batch read right before any change stay right."""
    expected = {
        "w_d21_accel_wait_inside_main": ("D21", (0,), "torchrun"),
        "w_d21_gather_for_metrics_nonempty": ("D21", (2,), "script"),
        "w_d20_monitored_barrier_after_crash": ("D20", (2,), "python"),
        "w_d21_pred_count_early_return": ("D21", (3,), "torchrun"),
        "w_mn3_sqlite_tracker_locked": ("MN3", (1,), "python"),
    }
    for job, (entry, odd, launcher) in expected.items():
        picture = _job(job, launcher)
        assert (picture.diagnoses[0].entry, picture.suspect_ranks) == (entry, odd), (job, _says(picture))
