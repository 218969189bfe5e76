"""The hang analysis on the real stacks of session 11e's held-out hung jobs (eval/hangs/t_*.py, read
by bench/bench_hang_unseen.py --dump): py-spy's dumps of every rank that runs, torch 2.13, gloo."""

from __future__ import annotations

import pytest

from tests.core.hang.test_hang_unseen_stacks import _job, _says
from triage.core.hang.source_context import line_context


def test_a_collective_under_a_test_of_an_object_made_on_rank_0_only() -> None:
    """`pbar = tqdm(...) if rank == 0 else None`; the postfix's all_reduce runs under `if pbar is
    not None:`; rank 1 went on to the final barrier (read D9 with rank 1 before)."""
    picture = _job("t_d21_tqdm_postfix_reduce", launcher="script")
    assert picture.diagnoses[0].entry == "D21", _says(picture)
    assert picture.suspect_ranks == (0,)
    assert "pbar" in " ".join(picture.diagnoses[0].evidence)


@pytest.mark.parametrize(
    ("job", "entry", "odd"),
    [
        ("t_d9_val_steps_floor_vs_sampler", "D9", (0,)),
        ("t_d20_download_except_return", "D20", (0,)),
        ("t_d21_best_metric_helper_empty", "D21", (0,)),
        ("t_mn3_env_report_pipe_full", "MN3", (0,)),
        ("t_p8_pdb_runcall_eval", "P8", (0,)),
    ],
)
def test_the_other_held_out_jobs_keep_their_reading(job: str, entry: str, odd: tuple[int, ...]) -> None:
    picture = _job(job)
    assert picture.diagnoses[0].entry == entry and picture.suspect_ranks == odd, _says(picture)


_SOURCE = """
def train(rank, writer_cls):
    pbar = make_bar() if rank == 0 else None
    if pbar is not None:
        reduce()
    if debug:
        reduce()


class Logger:
    def __init__(self, is_main_process):
        self.writer = None
        if is_main_process:
            self.writer = open_writer()

    def log(self, value):
        if self.writer:
            reduce()
"""


def test_a_name_made_on_some_ranks_only_makes_its_test_a_rank_test() -> None:
    assert line_context(_SOURCE, 5).rank_condition == (
        4,
        "pbar is not None (pbar is made only where `rank == 0`)",
    )
    assert line_context(_SOURCE, 7).rank_condition is None  # a flag every rank reads
    assert line_context(_SOURCE, 18).rank_condition == (
        17,
        "self.writer (self.writer is made only where `is_main_process`)",
    )


def test_a_name_every_rank_makes_is_no_rank_test() -> None:
    both = _SOURCE.replace("make_bar() if rank == 0 else None", "make_bar(rank == 0)")
    assert line_context(both, 5).rank_condition is None
