"""The hang analysis on stacks shaped like py-spy's (innermost first), with real source text."""

from __future__ import annotations

import textwrap
from dataclasses import replace

from triage.core.hang.analyse import analyse
from triage.core.hang.classify import classify
from triage.core.hang.codec import merge, picture_json
from triage.core.hang.source_context import line_context
from triage.core.hang.stacks import Frame, RankSample

C10D = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"
LOGGER = "/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py"
SCRIPT = "/job/train.py"

SOURCE = textwrap.dedent(
    """\
    import torch.distributed as dist

    def main(rank, loader, model):
        for batch in loader:
            loss = model(batch)
            loss.backward()
            if rank == 0:
                dist.barrier()
            try:
                check(batch)
            except ValueError:
                continue
            dist.all_reduce(loss)
        dist.barrier()
    """
)


def _sample(rank: int, *frames: Frame, active: bool = False, world: int = 2, host: str = "n1") -> RankSample:
    contexts = {f.where(): line_context(SOURCE, f.line) for f in frames if f.file == SCRIPT}
    return RankSample(
        pid=100 + rank, host=host, rank=rank, world_size=world, local_world_size=world,
        frames=frames, active=active, contexts=contexts,
    )  # fmt: skip


def _collective(name: str, line: int) -> tuple[Frame, ...]:
    return (Frame(name, C10D, 4000), Frame("wrapper", LOGGER, 83), Frame("main", SCRIPT, line))


BACKWARD = (
    Frame("_engine_run_backward", "/venv/lib/python3.11/site-packages/torch/autograd/graph.py", 979),
    Frame("backward", "/venv/lib/python3.11/site-packages/torch/autograd/__init__.py", 395),
    Frame("main", SCRIPT, 6),
)


def test_a_collective_under_a_rank_test_is_d21_and_names_the_rank() -> None:
    picture = analyse([_sample(0, *_collective("barrier", 8)), _sample(1, *_collective("all_reduce", 13))])
    assert picture.diagnoses[0].entry == "D21"
    assert picture.suspect_ranks == (0,)
    assert "rank == 0" in picture.diagnoses[0].evidence[0]


def test_a_rank_past_its_loop_while_another_is_in_backward_is_d9() -> None:
    picture = analyse([_sample(0, *_collective("barrier", 14)), _sample(1, *BACKWARD)])
    assert [d.entry for d in picture.diagnoses][:2] == ["D9", "D22"]
    assert picture.suspect_ranks == (0,)
    assert classify(_sample(1, *BACKWARD)).via.startswith("DDP")


def test_a_busy_backward_is_compute_not_a_collective() -> None:
    assert classify(_sample(1, *BACKWARD, active=True)).kind == "computing"


def test_a_continue_between_two_collectives_means_the_earlier_rank_skipped() -> None:
    picture = analyse([_sample(0, *_collective("all_reduce", 13)), _sample(1, *_collective("barrier", 8))])
    # rank 0 at line 13 and rank 1 at line 8 (under `if rank == 0`): the rank test wins
    assert picture.diagnoses[0].entry == "D21"


def test_a_rank_loading_data_while_others_wait_is_the_straggler() -> None:
    loading = (
        Frame("__getitem__", "/job/data.py", 20),
        Frame("fetch", "/venv/lib/python3.11/site-packages/torch/utils/data/_utils/fetch.py", 54),
        Frame("main", SCRIPT, 4),
    )
    picture = analyse(
        [_sample(0, *_collective("all_reduce", 13), world=3), _sample(1, *loading, world=3),
         _sample(2, *_collective("all_reduce", 13), world=3)]
    )  # fmt: skip
    assert picture.suspect_ranks == (1,)
    assert picture.diagnoses[0].entry == "MN3"
    assert "loading data" in picture.verdict


def test_a_missing_rank_on_a_single_node_is_gone_not_elsewhere() -> None:
    picture = analyse([_sample(0, *_collective("all_reduce", 13))])
    assert picture.missing_ranks == (1,)
    assert picture.diagnoses[0].entry == "D20"


def test_ranks_on_other_nodes_are_out_of_sight_and_merge_brings_them_back() -> None:
    def node(rank: int, host: str, *frames: Frame) -> RankSample:
        return RankSample(
            pid=100 + rank, host=host, rank=rank, world_size=2, local_world_size=1, frames=frames,
            contexts={f.where(): line_context(SOURCE, f.line) for f in frames if f.file == SCRIPT},
        )  # fmt: skip

    one = analyse([node(0, "n1", *_collective("barrier", 8))])
    assert one.missing_ranks == () and any("other nodes" in n for n in one.notes)
    two = analyse([node(1, "n2", *_collective("all_reduce", 13))])
    merged, slots = merge([picture_json(one, 1), picture_json(two, 1)])
    assert slots == 2
    assert merged.diagnoses[0].entry == "D21" and merged.suspect_ranks == (0,)


def test_every_rank_in_init_means_a_partner_never_arrived() -> None:
    init = (Frame("init_process_group", C10D, 1500), Frame("main", SCRIPT, 3))
    picture = analyse([_sample(0, *init), _sample(1, *init)])
    assert picture.diagnoses[0].entry == "P1"
    store = (Frame("_create_c10d_store", C10D.replace("distributed_c10d", "rendezvous"), 189), *init)
    assert analyse([_sample(0, *store), _sample(1, *store)]).diagnoses[0].entry == "P1"


def test_the_whole_world_past_the_store_in_init_waits_for_ranks_nobody_started() -> None:
    """torchrun started ranks 0 and 1 (WORLD_SIZE=2), the script passes world_size=3: both are past
    the store, in _new_process_group_helper, waiting for a rank 2 that does not exist (the stack
    py-spy read from that job, torch 2.13)."""
    joining = (
        Frame("_new_process_group_helper", C10D, 2169), Frame("init_process_group", C10D, 1899),
        Frame("_time_logger.<locals>.wrapper", LOGGER, 97), Frame("<module>", SCRIPT, 2),
    )  # fmt: skip
    picture = analyse([_sample(0, *joining), _sample(1, *joining)])
    assert [d.entry for d in picture.diagnoses][:2] == ["D1", "P1"] and picture.suspect_ranks == ()
    assert "not the launcher's" in picture.verdict
    # one of the world's ranks is not here (another node): that node, not the script, is suspect
    elsewhere = [replace(_sample(r, *joining), world_size=4) for r in (0, 1)]
    assert analyse(elsewhere).diagnoses[0].entry == "P1"


def test_no_collective_anywhere_is_not_called_a_distributed_hang() -> None:
    picture = analyse(
        [_sample(0, Frame("main", SCRIPT, 5), active=True), _sample(1, Frame("main", SCRIPT, 5), active=True)]
    )
    assert picture.diagnoses == ()


def test_source_that_does_not_parse_gives_an_empty_context() -> None:
    assert line_context("def (:", 1).function == ""


def test_a_rank_stuck_writing_a_checkpoint_is_named_as_saving() -> None:
    save = (
        Frame("write", "/usr/lib/python3.11/site-packages/torch/serialization.py", 1200),
        Frame("save", "/venv/lib/python3.11/site-packages/torch/serialization.py", 967),
        Frame("main", SCRIPT, 10),
    )
    state = classify(_sample(0, *save))
    assert state.kind == "saving" and state.detail == "torch.save"
    assert state.describe() == "writing a checkpoint (torch.save) at /job/train.py:10"
    picture = analyse([_sample(0, *save), _sample(1, *_collective("barrier", 14))])
    assert picture.suspect_ranks == (0,)
    assert picture.verdict == "rank 0 is stuck writing a checkpoint while the others wait in a collective"
    assert picture.diagnoses[0].entry == "MN3"


ASYNC_SOURCE = textwrap.dedent(
    """\
    import torch.distributed as dist

    def main(rank, loader, model):
        work = None
        for batch in loader:
            loss = model(batch)
            if work is not None:
                work.wait()
            work = dist.all_reduce(loss, async_op=True)
            print(loss.item())
    """
)


def _at(rank: int, line: int, *above: Frame, active: bool = False) -> RankSample:
    frames = (*above, Frame("main", SCRIPT, line))
    return RankSample(
        pid=100 + rank, host="n1", rank=rank, world_size=2, local_world_size=2, frames=frames,
        active=active, contexts={f"{SCRIPT}:{line}": line_context(ASYNC_SOURCE, line)},
    )  # fmt: skip


def test_an_idle_rank_at_a_wait_or_a_gpu_sync_point_waits_for_a_collective() -> None:
    waiting = classify(_at(0, 8))
    assert (waiting.kind, waiting.collective) == ("collective", "Work.wait")
    synced = classify(_at(0, 10))
    assert (synced.kind, synced.collective) == ("collective", ".item")
    assert "NCCL" in synced.via
    cuda = classify(
        _at(0, 10, Frame("synchronize", "/venv/lib/python3.11/site-packages/torch/cuda/__init__.py", 9))
    )
    assert cuda.collective == "torch.cuda.synchronize"
    # A rank that runs there is computing, not waiting.
    assert classify(_at(0, 10, active=True)).kind == "computing"


def test_every_rank_of_the_world_in_recv_is_a_cycle_of_waits() -> None:
    """No rank is missing and each waits to receive: the sends and receives are out of order, and
    every rank is a suspect (not "a rank out of sight holds them up")."""
    picture = analyse([_sample(0, *_collective("recv", 13)), _sample(1, *_collective("recv", 13))])
    assert [d.entry for d in picture.diagnoses][:1] == ["D19"]
    assert picture.suspect_ranks == (0, 1)
    assert "none is missing" in picture.verdict and "not among them" not in picture.verdict


def test_the_whole_world_in_one_collective_is_not_blamed_on_an_absent_rank() -> None:
    picture = analyse(
        [_sample(0, *_collective("all_reduce", 13)), _sample(1, *_collective("all_reduce", 13))]
    )
    assert [d.entry for d in picture.diagnoses] == ["D19", "E1", "MN2"]
    assert "none is missing" in picture.verdict
    # a rank of the world out of sight (another node): the one holding the others up may be there
    far = [replace(_sample(r, *_collective("all_reduce", 13), world=4), local_world_size=2) for r in (0, 1)]
    elsewhere = analyse(far)
    assert elsewhere.diagnoses[0].entry == "MN3" and "not among them" in elsewhere.verdict


def test_a_rank_gone_while_the_other_waits_outside_any_collective_is_d20() -> None:
    """Rank 0 died holding what rank 1 waits for outside any collective (a file lock, a poll of a
    file it was to write): rank 0 is the odd one, gone. Busy survivors are no such wait."""
    picture = analyse([_sample(1, Frame("main", SCRIPT, 9))])
    assert picture.missing_ranks == (0,)
    assert [d.entry for d in picture.diagnoses[:2]] == ["D20", "MN3"]
    assert picture.suspect_ranks == (0,)
    assert analyse([_sample(1, Frame("main", SCRIPT, 5), active=True)]).diagnoses == ()
    assert (
        analyse([_sample(0, Frame("main", SCRIPT, 9)), _sample(1, Frame("main", SCRIPT, 9))]).diagnoses == ()
    )
