"""The hang analysis on the real stacks of session 11's held-out hung jobs (eval/hangs/p_*.py, read
by bench/bench_hang_unseen.py --dump): py-spy's dumps of every rank that runs, torch 2.13, gloo."""

from __future__ import annotations

from dataclasses import replace

import pytest

from probes.hang.pyspy import parse_dump
from tests.core.hang.test_hang_unseen_stacks import DUMPS, _job, _rank, _says
from triage.core.hang.analyse import HangPicture, analyse
from triage.core.hang.classify import RankState, classify
from triage.core.hang.source_context import line_context
from triage.core.hang.stacks import Frame, RankSample

SPAWN = "torch.multiprocessing.spawn"
PLAIN = RankState.NO_LAUNCHER


def _with_locals(job: str, world: int) -> list[RankSample]:
    """The job's ranks with their integer locals, as the probe reads them from a rank idle in torch."""
    samples = []
    for rank in range(world):
        text = (DUMPS / f"{job}_rank{rank}.json").read_text(encoding="utf-8").replace("{SCRIPTS}", str(DUMPS))
        counters = parse_dump(text, 100 + rank, rank_of=True).counters
        samples.append(replace(_rank(job, rank, world), counters=counters))
    return samples


def test_a_hand_pulled_loop_left_on_stop_iteration_ran_out_of_data() -> None:
    """`while True: try: x = next(it) except StopIteration: break`: rank 1 (fewer lines in its
    files) waits in the barrier after the loop, rank 0 in the gradient all_reduce inside it."""
    picture = _job("p_d9_stopiteration_while", launcher=PLAIN)
    assert [d.entry for d in picture.diagnoses][:1] == ["D9"], _says(picture)
    assert picture.suspect_ranks == (1,)


def test_a_rank_that_stopped_pulling_from_an_endless_training_generator_decided_it_alone() -> None:
    """`for step, loss in enumerate(train_steps(...))` where train_steps loops `while True`: rank 1
    broke out on its own validation score, ranks 0 and 2 wait in the generator's all_reduce."""
    picture = _job("p_d19_generator_early_stop")
    assert [d.entry for d in picture.diagnoses][:2] == ["D19", "D9"], _says(picture)
    assert picture.suspect_ranks == (1,)


def test_a_rank_that_returned_early_on_a_non_finite_loss_skipped_a_step() -> None:
    """`train_step` returns before its all_reduce where the loss is not finite: rank 1 ran one
    step fewer and waits in the final barrier."""
    picture = _job("p_d20_nan_step_return", launcher=PLAIN)
    assert [d.entry for d in picture.diagnoses][:2] == ["D20", "D19"], _says(picture)
    assert picture.suspect_ranks == (1,) and "return" in picture.verdict


def test_an_early_return_on_another_test_still_reads_as_running_out_of_data() -> None:
    samples = [_rank("p_d20_nan_step_return", r, 3, PLAIN) for r in range(3)]
    renamed = [
        replace(s, contexts={k: replace(c, returns=tuple((n, "batch is None") for n, _ in c.returns))
                             for k, c in s.contexts.items()})
        for s in samples
    ]  # fmt: skip
    picture = analyse(renamed)
    assert [d.entry for d in picture.diagnoses][:1] == ["D9"], _says(picture)


def test_a_collective_run_in_an_executor_from_an_event_loop_is_the_rank_s() -> None:
    """Rank 0's report (under `if rank == 0: asyncio.run(report())`) awaits an all_gather run in an
    executor thread; its main thread idles in the event loop's selector. Rank 1 is in a barrier."""
    state = classify(_rank("p_d21_asyncio_report", 0, 2, SPAWN))
    assert (state.kind, state.collective) == ("collective", "all_gather_object"), state
    picture = _job("p_d21_asyncio_report", launcher=SPAWN)
    assert [d.entry for d in picture.diagnoses][:1] == ["D21"], _says(picture)
    assert picture.suspect_ranks == (0,)


def test_an_event_loop_with_no_thread_in_a_collective_stays_a_wait() -> None:
    sample = _rank("p_d21_asyncio_report", 0, 2, SPAWN)
    assert classify(replace(sample, threads=())).kind == "waiting"


def test_a_password_prompt_is_an_interactive_prompt() -> None:
    """getpass() under a launcher finds no terminal and reads stdin, which nobody writes to."""
    assert classify(_rank("p_p8_getpass_hub_token", 0, 2)).kind == "stdin"
    picture = _job("p_p8_getpass_hub_token")
    assert [d.entry for d in picture.diagnoses][:1] == ["P8"], _says(picture)
    assert picture.suspect_ranks == (0,)


def _gather(values: list[int]) -> HangPicture:
    samples = _with_locals("p_d19_gather_dst_rotation", 3)
    forced = [
        replace(s, counters=tuple((w, n, values[s.rank or 0] if n == "dst" else v) for w, n, v in s.counters))
        for s in samples
    ]
    return analyse(forced)


def test_ranks_that_pass_different_roots_to_a_gather_name_the_one_apart() -> None:
    """Ranks 0 and 2 wait in `dist.gather(..., dst=dst)` with dst 0 and 2; rank 1, dst 0, sent and
    went on to the barrier. Rank 2's root is the one apart."""
    picture = analyse(_with_locals("p_d19_gather_dst_rotation", 3))
    assert [d.entry for d in picture.diagnoses][:1] == ["D19"], _says(picture)
    assert picture.suspect_ranks == (2,) and "dst" in picture.verdict
    assert "rank 2 dst=2" in picture.diagnoses[0].evidence[0]


def test_roots_that_agree_or_that_nobody_outvotes_name_nobody_by_them() -> None:
    agreed = _gather([0, 0, 0])
    assert "dst" not in agreed.verdict, _says(agreed)
    split = _gather([0, 1, 2])
    assert split.suspect_ranks == () and "disagree" in split.verdict, _says(split)
    assert "dst" not in analyse([_rank("p_d19_gather_dst_rotation", r, 3) for r in range(3)]).verdict


HAND_PULLED = """\
def run(loader):
    it = iter(loader)
    while True:
{pull}
        dist.all_reduce(x)
"""


@pytest.mark.parametrize(
    ("pull", "ends"),
    [
        ("        try:\n            x = next(it)\n        except StopIteration:\n            break", True),
        ("        x = next(it, None)\n        if x is None:\n            break", True),
        ("        x = next(it, None)\n        if x is None:\n            return", True),
        ("        x = next(it)\n        if x.sum() > 3:\n            break", False),
        ("        try:\n            x = next(it)\n        except ValueError:\n            break", False),
    ],
)
def test_while_loops_that_end_with_their_iterator_are_told_apart(pull: str, ends: bool) -> None:
    source = HAND_PULLED.format(pull=pull)
    line = next(i for i, text in enumerate(source.splitlines(), 1) if "all_reduce" in text)
    assert line_context(source, line).exhausting == ((3,) if ends else ())


GENERATOR = """\
import itertools
def steps(model):
    while True:
        dist.all_reduce(model.grad)
        yield 1.0
def finite(model):
    while True:
        dist.all_reduce(model.grad)
        if done():
            return
        yield 1.0
def main(loader):
    for step, loss in {iterable}:
        dist.barrier()
"""


@pytest.mark.parametrize(
    ("iterable", "endless"),
    [
        ("enumerate(steps(model))", True),
        ("zip(itertools.count(), loader)", False),
        ("enumerate(itertools.cycle(loader))", True),
        ("enumerate(itertools.repeat(batch))", True),
        ("enumerate(itertools.repeat(batch, 3))", False),
        ("enumerate(finite(model))", False),
        ("enumerate(loader)", False),
    ],
)
def test_loops_over_iterables_that_never_run_out_are_told_apart(iterable: str, endless: bool) -> None:
    source = GENERATOR.format(iterable=iterable)
    line = next(i for i, text in enumerate(source.splitlines(), 1) if "barrier" in text)
    assert line_context(source, line).endless == ((13,) if endless else ())


def test_a_prompt_read_needs_the_prompt_library_above_the_user_s_frame() -> None:
    user = Frame("ask", "/w/train.py", 3)
    getpass_frame = Frame("_raw_input", "/usr/lib/python3.11/getpass.py", 146)
    base = RankSample(pid=1, host="h", rank=0)
    assert classify(replace(base, frames=(getpass_frame, user))).kind == "stdin"
    assert classify(replace(base, frames=(user, getpass_frame))).kind != "stdin"


def test_a_rank_that_got_a_cache_hit_skipped_the_collective_in_the_cached_function() -> None:
    """`@functools.lru_cache` over a function that all-reduces the epoch's sample count, keyed by
    the rank's own count: rank 0's count repeats, its call hits the cache and it waits in the
    barrier; ranks 1 and 2 wait in the all_reduce inside the function."""
    picture = _job("p_d19_lru_cache_global_count")
    assert [d.entry for d in picture.diagnoses][:2] == ["D19", "D21"], _says(picture)
    assert picture.suspect_ranks == (0,) and "cache" in picture.verdict


@pytest.mark.parametrize(
    ("decorator", "memoised"),
    [
        ("@functools.lru_cache(maxsize=32)", "@functools.lru_cache(maxsize=32)"),
        ("@lru_cache", "@lru_cache"),
        ("@functools.cache", "@functools.cache"),
        ("@cached_property", "@cached_property"),
        ("@torch.no_grad()", ""),
        ("@cache_dir_exists", ""),
    ],
)
def test_caching_decorators_are_read_from_the_source(decorator: str, memoised: str) -> None:
    source = f"{decorator}\ndef total(n):\n    dist.all_reduce(n)\n    return n\n"
    assert line_context(source, 3).memoised == memoised
