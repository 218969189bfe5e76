"""The hang analysis on the real stacks of session 9c's held-out hung jobs (eval/hangs/m_*.py, read
by bench/bench_hang_unseen.py --dump): py-spy's dumps of every rank that runs, torch 2.13, gloo."""

from __future__ import annotations

from tests.core.hang.test_hang_unseen_stacks import _job, _rank, _says
from triage.core.hang.analyse import analyse
from triage.core.hang.classify import RankState, classify
from triage.core.hang.source_context import line_context

SPAWN = "torch.multiprocessing.spawn"


def test_a_rank_at_an_interactive_console_is_at_a_prompt() -> None:
    """`code.interact()` on rank 0 when the loss spikes: its stack ends in code.py's raw_input."""
    state = classify(_rank("m_p8_code_interact", 0, 2))
    assert state.kind == "debugger" and "interactive console" in state.describe(), state
    picture = _job("m_p8_code_interact")
    assert [d.entry for d in picture.diagnoses][:1] == ["P8"] and picture.suspect_ranks == (0,), _says(
        picture
    )


def test_a_store_get_is_a_wait_for_a_key_and_its_setter_is_the_odd_rank() -> None:
    """Ranks 1 and 2 wait in `meta.get("vocab")` (a TCPStore: no Python frame under the line);
    rank 0 waits in a barrier under `if rank == 0:` before it sets the key."""
    state = classify(_rank("m_d21_store_then_barrier", 1, 3, RankState.NO_LAUNCHER))
    assert (state.kind, state.collective) == ("collective", "store.get"), state
    picture = _job("m_d21_store_then_barrier", launcher=RankState.NO_LAUNCHER)
    assert [d.entry for d in picture.diagnoses][:2] == ["D21", "D19"], _says(picture)
    assert picture.suspect_ranks == (0,)


def test_store_calls_are_read_only_on_names_bound_to_a_store() -> None:
    made = "meta = dist.TCPStore(host, port, world, is_master=True)\nv = meta.get('k')\n"
    assert line_context(made, 2).store_call == "get"
    assert (
        line_context("s = dist.distributed_c10d._get_default_store()\ns.wait(['k'])\n", 2).store_call
        == "wait"
    )
    assert line_context("self.store.add('n', 1)\n", 1).store_call == "add"
    assert line_context("cfg = {}\nv = cfg.get('k')\n", 2).store_call == ""


def test_a_collective_behind_a_random_draw_is_a_desync_of_the_ranks_streams() -> None:
    """`if random.random() < 0.5:` around an all_gather, `random` seeded with `seed + rank`."""
    picture = _job("m_d19_random_branch_gather")
    assert [d.entry for d in picture.diagnoses][:2] == ["D19", "D21"], _says(picture)
    assert picture.suspect_ranks == (1,) and "random number" in picture.diagnoses[0].evidence[0]


def test_a_rank_that_stopped_generating_early_with_a_sharded_model_is_d21() -> None:
    """FSDP2 sampling to an end token: rank 0 broke out first and waits in the barrier, rank 1 in
    the parameter all-gather of its next forward."""
    picture = _job("m_d21_fsdp_generate_eos")
    assert [d.entry for d in picture.diagnoses][:2] == ["D21", "D19"], _says(picture)
    assert picture.suspect_ranks == (0,) and "sharded model" in picture.diagnoses[0].evidence[0]


def test_the_other_held_out_jobs_of_session_9c_read_right() -> None:
    expected = {
        "m_d21_dcp_save_main": ("D21", (0,), "torchrun"),
        "m_d9_resume_skip_batches": ("D9", (1,), "torchrun"),
        "m_d9_steps_from_shard_len": ("D9", (2,), SPAWN),
        "m_mn3_dashboard_thread_target": ("MN3", (0,), "torchrun"),
        "m_mn3_log_queue_join": ("MN3", (0,), SPAWN),
    }
    for job, (entry, suspects, launcher) in expected.items():
        picture = _job(job, launcher=launcher)
        assert (picture.diagnoses[0].entry, picture.suspect_ranks) == (entry, suspects), (job, _says(picture))
    never = analyse([_rank("m_d1_stale_world_env", 0, 2, RankState.NO_LAUNCHER)])
    assert never.diagnoses[0].entry == "D1" and never.suspect_ranks == (1,), _says(never)
