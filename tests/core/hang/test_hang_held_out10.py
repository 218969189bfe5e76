"""The hang analysis on the real stacks of session 10's held-out hung jobs (eval/hangs/n_*.py, read
by bench/bench_hang_unseen.py --dump): py-spy's dumps of every rank that runs, torch 2.13, gloo."""

from __future__ import annotations

from tests.core.hang.test_hang_unseen_stacks import _job, _rank, _says
from triage.core.hang.analyse import HangPicture, analyse
from triage.core.hang.classify import RankState
from triage.core.hang.source_context import line_context
from triage.core.hang.stacks import Frame, RankSample

SPAWN = "torch.multiprocessing.spawn"

MANAGER = """\
class scope:
    def __exit__(self, kind, err, tb):
        dist.barrier()
        return True

def train():
    for step in range(10):
        with scope():
            loss.backward()
"""


def test_a_rank_in_exit_of_a_with_whose_body_the_others_are_in_left_it_first() -> None:
    """Rank 1 raised inside `with step_scope():`, whose `__exit__` waits in a barrier; the `except`
    around the `with` would skip the batch. Rank 0 waits in DDP's all-reduce inside the body."""
    picture = _job("n_d19_ctx_exit_barrier", launcher=SPAWN)
    assert [d.entry for d in picture.diagnoses][:2] == ["D19", "D20"], _says(picture)
    assert picture.suspect_ranks == (1,) and "`__exit__`" in picture.diagnoses[0].evidence[0]
    # Session 8's manager that swallows the error itself (`return True`) reads the same way.
    timed = _job("i_d19_timed_section", launcher=RankState.NO_LAUNCHER)
    assert [d.entry for d in timed.diagnoses][:1] == ["D19"] and timed.suspect_ranks == (2,), _says(timed)


def test_the_with_line_and_a_suppressing_exit_are_read_from_the_source() -> None:
    header = line_context(MANAGER, 8)
    assert header.managed == (8, 9, 9) and not header.managed_jumps
    assert line_context(MANAGER, 9).managed is None  # inside the body, not at the header
    assert line_context(MANAGER, 3).suppresses
    assert not line_context(MANAGER.replace("return True", "return None"), 3).suppresses


def test_a_collective_in_a_signal_handler_names_the_rank_that_ran_it() -> None:
    """SIGALRM (a wall-clock budget) fired on rank 1 mid-step; its handler's barrier runs inside
    the all_reduce call it interrupted, while rank 0 waits in that all_reduce."""
    picture = _job("n_d19_sigalrm_budget")
    assert [d.entry for d in picture.diagnoses][:2] == ["D19", "D21"], _says(picture)
    assert picture.suspect_ranks == (1,) and "SIGALRM" in picture.verdict


def test_signal_handlers_are_read_from_their_installation() -> None:
    source = (
        "import signal\n"
        "class Trainer:\n"
        "    def on_term(self, signum, frame):\n"
        "        dist.barrier()\n"
        "    def fit(self):\n"
        "        signal.signal(signal.SIGTERM, self.on_term)\n"
        "def other():\n"
        "    dist.barrier()\n"
    )
    assert line_context(source, 4).signal_handler == "SIGTERM"
    assert line_context(source, 8).signal_handler == ""


def test_a_collective_behind_a_running_count_is_a_desync_of_the_ranks_counts() -> None:
    """Throughput logging `if tokens_seen >= next_log:` on a metrics group: rank 0 crossed it first
    and waits there, rank 1 in the gradient all_reduce of its next step."""
    picture = _job("n_d19_token_log_group", launcher=RankState.NO_LAUNCHER)
    assert [d.entry for d in picture.diagnoses][:2] == ["D19", "D21"], _says(picture)
    assert picture.suspect_ranks == (0,) and "running count" in picture.diagnoses[0].evidence[0]


def test_running_counts_are_the_function_s_own_additions() -> None:
    source = (
        "def train(loader):\n"
        "    seen = 0\n"
        "    for step, batch in enumerate(loader):\n"
        "        seen += len(batch)\n"
        "        if seen > 1000:\n"
        "            dist.all_reduce(t)\n"
        "        if step % 10 == 0:\n"
        "            dist.all_reduce(t)\n"
    )
    assert line_context(source, 6).drifting == (5,)
    assert line_context(source, 8).drifting == ()


def test_a_collective_under_a_test_in_a_called_forward_is_the_conditional_one() -> None:
    """Sequence-parallel attention all-gathers keys only `if x.shape[1] > self.max_local_len`:
    rank 1 (a long batch) waits there, rank 0 in DDP's all-reduce with no test on its path."""
    picture = _job("n_d21_seq_parallel_long", launcher=SPAWN)
    assert [d.entry for d in picture.diagnoses][:2] == ["D21", "D19"], _says(picture)
    assert picture.suspect_ranks == (1,) and "x.shape[1]" in picture.verdict


def test_the_base_case_of_a_recursion_with_a_collective_per_level_is_a_desync() -> None:
    """A k-d tree split with an all_reduce at each level: rank 0 (fewer points) reached its leaves
    first and waits in the barrier after; ranks 1 and 2 are deeper in `split`."""
    picture = _job("n_d19_recursive_split", launcher=SPAWN)
    assert [d.entry for d in picture.diagnoses][:2] == ["D19", "D21"], _says(picture)
    assert picture.suspect_ranks == (0,) and "calls itself" in picture.diagnoses[0].evidence[0]


def test_the_other_held_out_jobs_of_session_10_read_right() -> None:
    expected = {
        "n_d9_iter_next_reduce": ("D9", (2,), "torchrun"),
        "n_mn3_fifo_checkpoint": ("MN3", (0,), "torchrun"),
        "n_mn3_gzip_empty_list": ("MN3", (2,), "torchrun"),
        "n_p8_collate_pdb": ("P8", (1,), "torchrun"),
    }
    for job, (entry, suspects, launcher) in expected.items():
        picture = _job(job, launcher=launcher)
        assert (picture.diagnoses[0].entry, picture.suspect_ranks) == (entry, suspects), (job, _says(picture))
    never = analyse([_rank("n_d1_config_file_init", 0, 4, RankState.NO_LAUNCHER)])
    assert never.diagnoses[0].entry == "D1" and never.suspect_ranks == (1, 2, 3), _says(never)


LIB = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"
SCRIPT = "/job/train.py"
SYNCED = """\
import torch.distributed as dist

class sync:
    def __exit__(self, kind, err, tb):
        dist.barrier()

def main(model):
    for step in range(100):
        with sync():
            loss = model(step)
            dist.all_reduce(loss)
"""


def _in_with(source: str, exit_line: int, with_line: int, body_line: int) -> HangPicture:
    def sample(rank: int, *frames: Frame) -> RankSample:
        contexts = {f.where(): line_context(source, f.line) for f in frames if f.file == SCRIPT}
        return RankSample(
            pid=100 + rank, host="n1", rank=rank, world_size=2, frames=frames, contexts=contexts
        )

    leaving = sample(
        1,
        Frame("barrier", LIB, 5356),
        Frame("sync.__exit__", SCRIPT, exit_line),
        Frame("main", SCRIPT, with_line),
    )
    return analyse([sample(0, Frame("all_reduce", LIB, 3252), Frame("main", SCRIPT, body_line)), leaving])


def test_an_exception_that_nothing_swallows_past_a_with_is_a_crash() -> None:
    picture = _in_with(SYNCED, 5, 9, 11)
    assert [d.entry for d in picture.diagnoses][:2] == ["D20", "D19"], _says(picture)
    assert picture.suspect_ranks == (1,)
    caught = SYNCED.replace("        with sync():\n", "        try:\n          with sync():\n").replace(
        "            dist.all_reduce(loss)\n",
        "            dist.all_reduce(loss)\n        except ValueError:\n            pass\n",
    )
    picture = _in_with(caught, 5, 10, 12)
    assert [d.entry for d in picture.diagnoses][:2] == ["D19", "D20"], _says(picture)
