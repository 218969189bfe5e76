"""The hang analysis on the real stacks of session 9's held-out hung jobs (eval/hangs/j_*.py, read
by bench/bench_hang_unseen.py --dump): py-spy's dumps of every rank that runs, torch 2.13, gloo."""

from __future__ import annotations

from dataclasses import replace

from tests.core.hang.test_hang_unseen_stacks import _job, _rank, _says
from triage.core.hang.analyse import analyse
from triage.core.hang.classify import RankState


def test_a_rank_that_returned_early_from_a_function_skipped_the_collective_in_it() -> None:
    """validate() returns on a rank with no validation batch (`if len(loader) == 0: return`) before
    its all_reduce: rank 2 waits past the call, in the barrier, ranks 0 and 1 inside validate()."""
    picture = _job("j_d21_val_early_return", launcher="torch.multiprocessing.spawn")
    assert picture.diagnoses[0].entry == "D21" and picture.suspect_ranks == (2,), _says(picture)
    assert "len(loader) == 0" in picture.diagnoses[0].evidence[0]


def test_a_collective_reached_through_a_retry_loop_is_issued_again_on_one_rank() -> None:
    """with_retry() calls `sync_and_publish` (a barrier, then a move that failed once on rank 0)
    again from its `except OSError:`: rank 0 waits in a second barrier, rank 1 in the next step."""
    picture = _job("j_d19_retry_barrier")
    assert picture.diagnoses[0].entry == "D19" and picture.suspect_ranks == (0,), _says(picture)
    assert "for attempt in range(attempts)" in picture.diagnoses[0].evidence[0]


def test_a_rank_out_of_a_while_loop_on_its_own_test_took_a_decision_of_its_own() -> None:
    """`while not converged` on each rank's own loss: rank 1 left it and waits in the barrier,
    rank 0 trains on. Not a loop over the data (D9): a rank-local decision (D19)."""
    picture = _job("j_d19_while_not_converged", launcher="torch.multiprocessing.spawn")
    assert [d.entry for d in picture.diagnoses][:2] == ["D19", "D9"], _says(picture)
    assert picture.suspect_ranks == (1,) and "while not converged" in picture.diagnoses[0].evidence[0]


def test_a_rank_missing_between_two_started_by_hand_is_gone_not_never_started() -> None:
    """One python per rank from a shell loop (no launcher): rank 1 died before
    init_process_group, ranks 0 and 2 wait there. Ranks are started in a row, so the one missing
    between two that run was started (D20); one missing past them may never have been (D1)."""
    gone = [replace(_rank("j_d20_empty_shard_python", r, 3, RankState.NO_LAUNCHER)) for r in (0, 2)]
    picture = analyse(gone)
    assert picture.diagnoses[0].entry == "D20" and picture.suspect_ranks == (1,), _says(picture)
    never = analyse([_rank("j_d1_plain_python_rank_flag", 0, 2, RankState.NO_LAUNCHER)])
    assert never.diagnoses[0].entry == "D1" and never.suspect_ranks == (1,), _says(never)


def test_the_other_held_out_jobs_of_session_9_read_right() -> None:
    expected = {
        "j_d21_gather_in_except": ("D21", (1,)),
        "j_d21_zero_consolidate": ("D21", (0,)),
        "j_d9_no_sync_accum": ("D9", (1,)),
        "j_mn3_barrier_in_filelock": ("MN3", (1, 2)),
        "j_mn3_tracking_server": ("MN3", (0,)),
        "j_p8_post_mortem": ("P8", (2,)),
    }
    for job, (entry, suspects) in expected.items():
        picture = _job(job)
        assert (picture.diagnoses[0].entry, picture.suspect_ranks) == (entry, suspects), (job, _says(picture))


def test_a_collective_inside_an_except_clause_names_the_rank_that_raised() -> None:
    """Rank 1 met a malformed batch and waits in all_gather_object inside `except RuntimeError`;
    ranks 0 and 2 wait in the gradient all_reduce of the next lines."""
    picture = _job("j_d21_gather_in_except")
    assert picture.diagnoses[0].entry == "D21" and picture.suspect_ranks == (1,), _says(picture)
    assert "except RuntimeError" in picture.diagnoses[0].evidence[0]
