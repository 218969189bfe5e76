"""The hang analysis on the real stacks of session 10b's held-out hung jobs (eval/hangs/o_*.py, read
by bench/bench_hang_unseen.py --dump): py-spy's dumps of every rank that runs, torch 2.13, gloo."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.core.hang.test_hang_unseen_stacks import _job, _rank, _says
from triage.core.hang.analyse import analyse
from triage.core.hang.classify import RankState
from triage.core.hang.hooks import _SET_LOOP
from triage.core.hang.locks import read_threads
from triage.core.hang.source_context import line_context
from triage.core.hang.stacks import Frame, ThreadStack

SPAWN = "torch.multiprocessing.spawn"

WRITER = """\
class Writer:
    def __del__(self):
        dist.barrier()

def evaluate(rank):
    writer = Writer() if {test} else None
"""


def test_a_collective_in_a_finalizer_names_the_rank_that_collected_the_object() -> None:
    """Rank 0 alone made a prediction writer whose `__del__` waits in a barrier; it ran when
    `evaluate()` returned. Rank 1 went on to the next epoch's all_reduce."""
    picture = _job("o_d21_del_writer_barrier", launcher=SPAWN)
    assert [d.entry for d in picture.diagnoses][:2] == ["D21", "D19"], _says(picture)
    assert picture.suspect_ranks == (0,) and "finalizer" in picture.verdict


def test_a_finalizer_s_class_made_under_a_rank_test_is_read_from_the_source() -> None:
    ruled = line_context(WRITER.format(test="rank == 0"), 3)
    assert (ruled.exit_hook, ruled.made_under) == ("__del__", "rank == 0")
    anywhere = line_context(WRITER.format(test="ready"), 3)
    assert (anywhere.exit_hook, anywhere.made_under) == ("__del__", "")


def test_a_rank_in_an_exit_hook_while_the_others_train_raised() -> None:
    """Rank 2 raised (a label out of range); its `atexit` summary waits in a barrier and keeps the
    process alive, while ranks 0 and 1 wait in step 6's all_reduce of `for step in range(200)`."""
    picture = _job("o_d20_atexit_summary", launcher=RankState.NO_LAUNCHER)
    assert [d.entry for d in picture.diagnoses][:2] == ["D20", "D19"], _says(picture)
    assert picture.suspect_ranks == (2,) and "exit hook" in picture.verdict


@pytest.mark.parametrize(
    ("source", "hook"),
    [
        ("import atexit\ndef report():\n    dist.barrier()\natexit.register(report)\n", "atexit"),
        ("import atexit\n@atexit.register\ndef report():\n    dist.barrier()\n", "atexit"),
        ("class S:\n    def report(self):\n        dist.barrier()\natexit.register(s.report)\n", "atexit"),
        ("def report():\n    dist.barrier()\nreport()\n", ""),
        ("def flush():\n    dist.barrier()\nweakref.finalize(writer, flush)\n", "__del__"),
    ],
)
def test_exit_hooks_are_read_from_their_registration(source: str, hook: str) -> None:
    line = next(i for i, text in enumerate(source.splitlines(), 1) if "barrier" in text)
    assert line_context(source, line).exit_hook == hook


def test_a_collective_per_element_of_a_set_has_no_odd_rank() -> None:
    """`for name in set(local) | set(REQUIRED)`: rank 0 reached a list (all_gather_object) where
    ranks 1 and 2 reached a tensor (all_reduce); each process orders the set its own way."""
    picture = _job("o_d19_metric_set_order")
    assert [d.entry for d in picture.diagnoses][:1] == ["D19"], _says(picture)
    assert picture.suspect_ranks == () and "set" in picture.verdict


def test_loops_over_sets_are_told_from_ordered_ones() -> None:
    assert _SET_LOOP.match("for name in set(local) | set(REQUIRED)")
    assert _SET_LOOP.match("for key in {'loss', 'acc'}")
    assert _SET_LOOP.match("for key in seen.union(other)")
    assert not _SET_LOOP.match("for name in sorted(set(local))")
    assert not _SET_LOOP.match("for name, value in metrics.items()")
    assert not _SET_LOOP.match("for key in {k: v for k, v in d.items()}")


def test_a_lock_won_by_a_different_thread_on_each_rank_is_a_cycle() -> None:
    """Rank 0's training loop holds the lock in all_reduce while its snapshot thread waits for it;
    rank 1's snapshot thread holds it in all_gather_object while its loop waits for it."""
    picture = _job("o_d19_snapshot_thread_lock")
    assert [d.entry for d in picture.diagnoses][:2] == ["D19", "MN3"], _says(picture)
    assert picture.suspect_ranks == () and "lock" in picture.verdict


def test_a_lock_wait_on_one_rank_only_is_a_straggler() -> None:
    """Without rank 0's snapshot thread, rank 1 alone waits on a lock: a straggler (MN3), as before."""
    samples = [_rank("o_d19_snapshot_thread_lock", r, 2) for r in range(2)]
    samples[0] = replace(samples[0], threads=())
    picture = analyse(samples)
    assert [d.entry for d in picture.diagnoses][:1] == ["MN3"] and picture.suspect_ranks == (1,), _says(
        picture
    )


@pytest.mark.parametrize(
    ("job", "entry", "odd"),
    [
        ("o_d21_empty_val_shard", "D21", (3,)),
        ("o_d9_local_sgd_counted_steps", "D9", (1,)),
        ("o_mn3_popen_stdin_open", "MN3", (0,)),
        ("o_p8_grad_hook_breakpoint", "P8", (1,)),
    ],
)
def test_the_batch_s_other_jobs_read_as_before(job: str, entry: str, odd: tuple[int, ...]) -> None:
    picture = _job(job)
    assert picture.diagnoses[0].entry == entry and picture.suspect_ranks == odd, _says(picture)


def test_the_probe_keeps_threads_in_a_collective_or_blocked_on_the_user_s_own_line() -> None:
    user = Frame("snapshot", "/job/train.py", 33)
    library = Frame("Queue.get", "/usr/lib/python3.11/queue.py", 171)
    collective = Frame(
        "all_reduce", "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", 1
    )
    threads = [
        ThreadStack("on a lock", (user,)),
        ThreadStack("in a collective", (collective, user)),
        ThreadStack("in the library", (library, user)),
        ThreadStack("computing", (user,), active=True),
    ]
    assert [t.name for t in read_threads(threads)] == ["on a lock", "in a collective"]
