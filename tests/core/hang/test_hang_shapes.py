"""Stack shapes beyond a rank in a collective: a debugger or a prompt holding a rank, a collective
reached through a call made only on some ranks, ranks that were never started, mp.spawn ranks."""

from __future__ import annotations

import textwrap

from triage.core.hang.analyse import analyse
from triage.core.hang.classify import classify
from triage.core.hang.codec import merge, picture_json
from triage.core.hang.source_context import line_context
from triage.core.hang.stacks import Frame, RankSample

LIB = "/venv/lib/python3.11/site-packages/torch/distributed/"
STDLIB = "/usr/lib/python3.11/"
SCRIPT = "/job/train.py"
SOURCE = textwrap.dedent(
    """\
    import torch.distributed as dist

    def save(model):
        write(model)
        dist.barrier()

    def main(rank, model):
        if rank >= 0:
            for step in range(10):
                dist.all_reduce(model)
                if rank == 0 and step == 2:
                    save(model)
                name = input("next? ")
        dist.init_process_group("gloo")
    """
)


def _sample(rank: int, *frames: Frame, launcher: str = "torchrun", **kw: object) -> RankSample:
    contexts = {f.where(): line_context(SOURCE, f.line) for f in frames if f.file == SCRIPT}
    return RankSample(
        pid=100 + rank, host="n1", rank=rank, world_size=kw.pop("world", 2), local_world_size=kw.pop("local", 2),
        frames=frames, contexts=contexts, launcher=launcher, **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def _in(name: str, *user_lines: int, file: str = LIB + "distributed_c10d.py") -> tuple[Frame, ...]:
    return (Frame(name, file, 4000), *(Frame("f", SCRIPT, line) for line in user_lines))


PDB = (
    Frame("cmdloop", STDLIB + "cmd.py", 126),
    Frame("interaction", STDLIB + "pdb.py", 433),
    Frame("trace_dispatch", STDLIB + "bdb.py", 90),
    Frame("main", SCRIPT, 10),
)


def test_a_rank_at_a_pdb_prompt_is_p8_and_the_suspect() -> None:
    picture = analyse([_sample(0, *PDB), _sample(1, *_in("all_reduce", 10))])
    assert classify(_sample(0, *PDB)).kind == "debugger"
    assert [d.entry for d in picture.diagnoses][:2] == ["P8", "MN3"]
    assert picture.suspect_ranks == (0,)


def test_a_script_run_under_a_debugger_is_not_stopped_in_it() -> None:
    """`python -m pdb train.py`, or an IDE's debugger: its frames sit below the script's."""
    under = (
        *_in("all_reduce", 10),
        Frame("run", STDLIB + "bdb.py", 600),
        Frame("_runscript", STDLIB + "pdb.py", 1),
    )
    assert classify(_sample(0, *under)).kind == "collective"


def test_every_rank_at_a_prompt_is_still_a_diagnosis() -> None:
    reading = (Frame("main", SCRIPT, 13),)  # input() is built in: no frame of its own
    picture = analyse([_sample(0, *reading), _sample(1, *PDB)])
    assert classify(_sample(0, *reading)).kind == "stdin"
    assert picture.diagnoses[0].entry == "P8" and picture.suspect_ranks == (0, 1)
    busy = classify(_sample(0, *reading, active=True))
    assert busy.kind == "computing"  # a running thread is not waiting for its terminal


def test_a_collective_reached_through_a_call_under_a_rank_test_is_d21() -> None:
    # rank 0: barrier in save() (line 5), called at line 12 under `if rank == 0 and step == 2`
    picture = analyse([_sample(0, *_in("barrier", 5, 12)), _sample(1, *_in("all_reduce", 10))])
    assert picture.diagnoses[0].entry == "D21" and picture.suspect_ranks == (0,)
    assert f"{SCRIPT}:11" in picture.diagnoses[0].evidence[0]
    # the `if rank >= 0:` around both stacks singles no rank out
    assert "rank >= 0" not in picture.diagnoses[0].evidence[0]
    again, _ = merge([picture_json(picture, 2)])
    assert again.diagnoses[0].entry == "D21" and again.suspect_ranks == (0,)


def test_a_rank_test_every_rank_passes_through_is_no_d21() -> None:
    picture = analyse([_sample(0, *_in("broadcast", 10)), _sample(1, *_in("all_reduce", 10))])
    assert picture.diagnoses[0].entry == "D19"
    assert classify(_sample(0, *_in("broadcast", 10))).conditions == ((SCRIPT, 8, "rank >= 0"),)


INIT = (
    Frame("_create_c10d_store", LIB + "rendezvous.py", 199),
    Frame("init_process_group", LIB + "distributed_c10d.py", 1892),
    Frame("main", SCRIPT, 14),
)


def test_ranks_never_started_by_hand_are_d1_and_named() -> None:
    """WORLD_SIZE=3, two plain `python` ranks meeting on loopback: rank 2 is missing here."""
    samples = [
        _sample(r, *INIT, launcher="none", world=3, local=None, master_addr="127.0.0.1") for r in (0, 1)
    ]
    picture = analyse(samples)
    assert picture.diagnoses[0].entry == "D1"
    assert picture.suspect_ranks == (2,) and picture.missing_ranks == (2,)


def test_a_rank_missing_under_a_launcher_is_d20() -> None:
    samples = [_sample(0, *INIT, world=2, local=2)]
    assert analyse(samples).diagnoses[0].entry == "D20"


def test_ranks_of_another_master_host_may_run_elsewhere() -> None:
    samples = [
        _sample(r, *INIT, launcher="none", world=3, local=None, master_addr="10.0.0.1") for r in (0, 1)
    ]
    picture = analyse(samples)
    assert picture.missing_ranks == () and picture.suspect_ranks == ()
    assert any("other nodes" in note for note in picture.notes)
    # started by hand, all waiting to form the group: a rank never started (D1) before connectivity
    assert [d.entry for d in picture.diagnoses][:2] == ["D1", "P1"]


AGENT = (
    Frame("next_rendezvous", LIB + "elastic/rendezvous/static_tcp_rendezvous.py", 67),
    Frame("_rendezvous", LIB + "elastic/agent/server/api.py", 528),
    Frame("<module>", "/venv/bin/torchrun", 8),
)


def test_a_launcher_with_no_worker_in_its_rendezvous_is_a_node_that_never_joined() -> None:
    agent = RankSample(pid=7, host="n1", rank=None, frames=AGENT, launcher="torchrun", role="agent")
    picture = analyse([agent])
    assert [d.entry for d in picture.diagnoses][:2] == ["P1", "D2"]
    assert picture.suspect_ranks == () and "torchrun" in picture.verdict
    state = picture.ranks[0]
    assert (state.kind, state.collective, state.user_frame) == ("init", "rendezvous", None)
    idle = RankSample(pid=7, host="n1", rank=None, frames=AGENT[2:], launcher="torchrun", role="agent")
    assert analyse([idle]).diagnoses == ()


DATA = "/venv/lib/python3.11/site-packages/torch/utils/data/"


def test_a_rank_waiting_on_its_loader_is_placed_at_its_stuck_workers_line() -> None:
    rank = (Frame("_next_data", DATA + "dataloader.py", 1400), Frame("main", SCRIPT, 9))
    forked = (Frame("_worker_loop", DATA + "_utils/worker.py", 374), Frame("main", SCRIPT, 9))
    stuck = (Frame("__getitem__", SCRIPT, 4), Frame("fetch", DATA + "_utils/fetch.py", 54), *forked)
    sample = _sample(1, *rank, worker_pid=77, worker_frames=stuck[:2])
    state = classify(sample)
    assert (state.kind, state.user_frame) == ("data", stuck[0])
    assert "DataLoader worker PID 77" in state.describe()
    assert classify(_sample(1, *rank)).user_frame == rank[1]


NEW_GROUP = (
    Frame("_new_process_group_helper", LIB + "distributed_c10d.py", 2169),
    Frame("_new_group_with_tag", LIB + "distributed_c10d.py", 6056),
    Frame("new_group", LIB + "distributed_c10d.py", 5863),
    Frame("main", SCRIPT, 14),
)


def test_ranks_left_in_new_group_while_others_are_past_it_made_different_groups() -> None:
    """new_group([0, 1]) called on ranks 0 and 1 only: the next group's members (1 and 2) wait in
    new_group() for each other, rank 0 waits in the next collective."""
    picture = analyse([_sample(0, *_in("barrier", 10)), *(_sample(r, *NEW_GROUP) for r in (1, 2))])
    assert picture.ranks[1].collective == "new_group"
    assert [d.entry for d in picture.diagnoses][:2] == ["D21", "D19"]
    assert picture.suspect_ranks == (1, 2) and "new_group()" in picture.verdict
    every = analyse([_sample(r, *NEW_GROUP) for r in (0, 1)])
    assert every.diagnoses[0].entry == "D21" and every.suspect_ranks == ()
    assert classify(_sample(0, *INIT)).collective == "init_process_group"


def test_every_rank_stuck_loading_data_says_so_though_no_collective_waits() -> None:
    rank = (Frame("_next_data", DATA + "dataloader.py", 1400), Frame("main", SCRIPT, 9))
    picture = analyse([_sample(0, *rank), _sample(1, *rank)])
    assert picture.diagnoses == () and "every rank is loading data" in picture.verdict
    mixed = analyse([_sample(0, *rank), _sample(1, Frame("main", SCRIPT, 9), active=True)])
    assert "every rank" not in mixed.verdict


def test_the_rank_tests_real_scripts_write_are_rank_tests() -> None:
    from triage.core.hang.source_context import RANK_TEST

    tests = [
        "rank == 0", "dist.get_rank() != 0", "master_process", "ddp_rank == 0", "self.global_rank == 0",
        "accelerator.is_main_process", "accelerator.process_index == 0", "trainer.is_global_zero",
        "self.is_world_process_zero()", "args.local_rank in [-1, 0]", 'os.environ["RANK"] == "0"',
        "is_rank0", "xm.is_master_ordinal()", "rank_id == 0", "LOCAL_RANK == 0",
    ]  # fmt: skip
    assert [t for t in tests if not RANK_TEST.search(t)] == []
    others = ["ranking_loss", "step % 100 == 0", "frank", "epoch > 0 and use_bank", "cranked"]
    assert [t for t in others if RANK_TEST.search(t)] == []
