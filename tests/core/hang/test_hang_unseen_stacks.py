"""The hang analysis on real stacks of hung jobs written apart from it (eval/hangs/, read by
bench/bench_hang_unseen.py): py-spy's dumps of every rank (tests/fixtures/hang/pyspy/unseen/,
torch 2.13, gloo), each job's script kept beside them as `.py.txt`."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from probes.hang.pyspy import parse_dump
from triage.core.hang.analyse import HangPicture, analyse
from triage.core.hang.classify import classify
from triage.core.hang.locks import read_threads
from triage.core.hang.source_context import line_context
from triage.core.hang.stacks import RankSample

DUMPS = Path(__file__).resolve().parents[2] / "fixtures" / "hang" / "pyspy" / "unseen"


def _rank(job: str, rank: int, world: int, launcher: str = "torchrun") -> RankSample:
    text = (DUMPS / f"{job}_rank{rank}.json").read_text(encoding="utf-8").replace("{SCRIPTS}", str(DUMPS))
    dump = parse_dump(text, 100 + rank)
    dump = replace(dump, threads=read_threads(dump.threads))  # the threads the probe keeps
    frames = (*dump.frames, *(f for t in dump.threads for f in t.frames))
    contexts = {
        f.where(): line_context(Path(f.file + ".txt").read_text(encoding="utf-8"), f.line)
        for f in frames
        if f.file.startswith(str(DUMPS))
    }
    return RankSample(
        pid=100 + rank, host="n1", rank=rank, world_size=world, local_world_size=world, frames=dump.frames,
        active=dump.active, contexts=contexts, launcher=launcher, threads=dump.threads, master_addr="127.0.0.1",
    )  # fmt: skip


def _job(job: str, launcher: str = "torchrun") -> HangPicture:
    world = len(list(DUMPS.glob(f"{job}_rank*.json")))
    return analyse([_rank(job, r, world, launcher) for r in range(world)])


def _says(picture: HangPicture) -> str:
    return f"{[d.entry for d in picture.diagnoses]} {picture.suspect_ranks} {picture.verdict}"


def test_ddp_s_constructor_waits_for_the_other_ranks_in_a_collective() -> None:
    """DDP's constructor checks every rank's parameter shapes from C++: no torch.distributed
    collective is on the stack, only _verify_param_shape_across_processes."""
    state = classify(_rank("mn3_flag_file", 0, 2))
    assert (state.kind, state.collective) == ("collective", "all_gather"), state
    assert "DDP constructor" in state.via
    picture = _job("mn3_flag_file")  # rank 1 polls for a file in a sleep loop
    assert picture.diagnoses[0].entry == "MN3" and picture.suspect_ranks == (1,), _says(picture)


def test_a_ddp_forward_waits_in_its_buffer_broadcast() -> None:
    state = classify(_rank("d21_eval_ddp_forward", 0, 2))
    assert (state.kind, state.collective) == ("collective", "broadcast"), state
    assert "DDP forward()" in state.via
    picture = _job("d21_eval_ddp_forward")
    assert picture.diagnoses[0].entry == "D21" and picture.suspect_ranks == (0,), _says(picture)


def test_a_rank_whose_script_ended_while_a_thread_keeps_it_alive_is_gone() -> None:
    state = classify(_rank("d20_crash_thread_alive", 1, 2))
    assert state.kind == "exited" and "script ended" in state.detail, state
    picture = _job("d20_crash_thread_alive")
    assert picture.diagnoses[0].entry == "D20" and picture.suspect_ranks == (1,), _says(picture)


def test_an_early_return_under_a_rank_test_makes_the_rest_of_the_function_rank_conditional() -> None:
    picture = _job("d21_helper_reduce")  # `if dist.get_rank() != 0: return` before the reduce
    assert picture.diagnoses[0].entry == "D21" and picture.suspect_ranks == (0,), _says(picture)
    assert "dist.get_rank() != 0" in picture.diagnoses[0].evidence[0]


def test_a_collective_in_a_loop_over_a_list_other_ranks_do_not_enter_is_d21() -> None:
    """A callback list built on rank 0 only: no rank test on any stack, but rank 0's barrier is
    reached through `for callback in self.callbacks`, which rank 1 passed without entering."""
    picture = _job("d21_callback_barrier")
    assert picture.diagnoses[0].entry == "D21" and picture.suspect_ranks == (0,), _says(picture)
    assert "for callback in self.callbacks" in picture.diagnoses[0].evidence[0]


def test_a_collective_under_a_data_test_names_the_rank_that_did_not_take_it() -> None:
    picture = _job("d21_gather_object_empty_shard")  # ranks 0-2 gather, rank 3's shard is empty
    assert picture.diagnoses[0].entry == "D21" and picture.suspect_ranks == (3,), _says(picture)


def test_a_rank_that_returned_from_the_training_function_left_its_loop_early() -> None:
    picture = _job("d9_spawn_early_return", launcher="torch.multiprocessing.spawn")
    assert picture.diagnoses[0].entry == "D9" and picture.suspect_ranks == (1,), _says(picture)


def test_a_receive_with_no_send_is_a_desync_not_a_rank_conditional_collective() -> None:
    picture = _job("d19_recv_no_send")  # rank 1's recv sits under `else:` of `if rank == 0:`
    assert picture.diagnoses[0].entry == "D19" and picture.suspect_ranks == (1,), _says(picture)


def test_one_rank_ahead_of_two_is_the_odd_one_out() -> None:
    picture = _job("d19_swallowed_step")  # rank 1 swallowed an exception and skipped a step
    assert picture.diagnoses[0].entry == "D19" and picture.suspect_ranks == (1,), _says(picture)


def test_the_jobs_read_right_before_still_read_right() -> None:
    expected = {
        "d9_token_budget": ("D9", (1,)),
        "d19_order_stop_flag": ("D19", (0,)),
        "d21_new_group_half": ("D21", (0, 1)),
        "mn3_prefetch_queue": ("MN3", (1,)),
        "p8_overwrite_prompt": ("P8", (0,)),
        "d21_broadcast_config_by_hand": ("D21", (0,)),
    }
    for job, (entry, suspects) in expected.items():
        picture = _job(job)
        assert (picture.diagnoses[0].entry, picture.suspect_ranks) == (entry, suspects), (job, _says(picture))


def test_ranks_past_a_loop_over_metrics_are_a_desync_not_out_of_batches() -> None:
    """Rank 1 has one metric more, so one all_reduce more in the loop over the keys: the others
    are past that loop, in the barrier, but a loop over a dict of metrics is no loop over the data
    (D9 is running out of batches); the odd one out is the rank alone in the loop."""
    picture = _job("h_d19_metric_keys")
    assert picture.diagnoses[0].entry == "D19" and picture.suspect_ranks == (1,), _says(picture)


def test_ranks_the_group_asks_for_that_nothing_started_are_named() -> None:
    """torchrun started 2 ranks, the script hard-codes init_process_group(world_size=4): the
    world size is read from the arguments of the init_process_group frame (py-spy --locals)."""
    text = (DUMPS / "d1_hardcoded_world_locals_rank0.json").read_text(encoding="utf-8")
    assert parse_dump(text, 100, rank_of=True).world_asked == 4
    assert parse_dump(text, 100).world_asked is None  # arguments are read only where asked
    samples = [replace(_rank("d1_hardcoded_world", r, 2), world_asked=4) for r in range(2)]
    picture = analyse(samples)
    assert picture.diagnoses[0].entry == "D1" and picture.suspect_ranks == (2, 3), _says(picture)
    assert picture.missing_ranks == (2, 3) and "world_size=4" in picture.verdict
    # without the argument (a process read before it), the same stacks name no rank
    assert _job("d1_hardcoded_world").suspect_ranks == ()


def test_a_rank_that_broke_out_of_a_counting_loop_took_a_decision_of_its_own() -> None:
    """Early stopping on each rank's own eval metric (i_d19_trainer_early_stop, 4 ranks): rank 2
    left `for _ in range(max_steps)` through its `break` and waits in save_model's barrier, the
    others in DDP's backward inside that loop. A counting loop runs as often on every rank: out of
    it early is a rank-local decision (D19), not the end of its data (D9)."""
    picture = _job("i_d19_trainer_early_stop")
    assert [d.entry for d in picture.diagnoses][:2] == ["D19", "D9"], _says(picture)
    assert picture.suspect_ranks == (2,), _says(picture)
    assert "for _ in range(max_steps)" in picture.diagnoses[0].evidence[0]
    # a loop over the data left early is still running out of batches
    assert _job("i_d9_bucket_sampler").diagnoses[0].entry == "D9"


def test_a_collective_from_a_thread_only_one_rank_runs_is_the_odd_one() -> None:
    """Rank 0 validates in a background thread that all-reduces the accuracy, while its main
    thread and rank 1 wait in the gradient all_reduce at the same line (i_d21_async_eval_thread):
    the main threads look alike, the extra thread's collective is the one rank 1 never issues."""
    picture = _job("i_d21_async_eval_thread")
    assert picture.diagnoses[0].entry == "D21" and picture.suspect_ranks == (0,), _says(picture)
    assert "thread 'validation'" in picture.diagnoses[0].evidence[0]
    assert "i_d21_async_eval_thread.py:27" in picture.diagnoses[0].evidence[0]


def _spawned(job: str, ranks: tuple[int, ...], asked: int, master: str) -> HangPicture:
    """mp.spawn's ranks as the probe reads them: no WORLD_SIZE in their environment, the world
    size from init_process_group's argument (py-spy --locals), MASTER_ADDR where the parent set it."""
    samples = [
        replace(
            _rank(job, r, 0, "torch.multiprocessing.spawn"),
            world_size=None,
            local_world_size=None,
            world_asked=asked,
            master_addr=master,
        )
        for r in ranks
    ]
    return analyse(samples)


def test_spawned_ranks_past_the_ones_that_run_were_never_started() -> None:
    """world_size = nodes * gpus with --nodes defaulting to 2, mp.spawn of 2 on one machine meeting
    on 127.0.0.1 (i_d1_nodes_times_gpus): ranks 0 and 1 wait in init for ranks 2 and 3."""
    picture = _spawned("i_d1_nodes_times_gpus", (0, 1), 4, "127.0.0.1")
    assert picture.diagnoses[0].entry == "D1" and picture.suspect_ranks == (2, 3), _says(picture)
    assert "world_size=4" in picture.verdict
    # a master elsewhere: ranks 2 and 3 may run on another node, nobody is named
    elsewhere = _spawned("i_d1_nodes_times_gpus", (0, 1), 4, "10.0.0.7")
    assert elsewhere.suspect_ranks == () and elsewhere.notes, _says(elsewhere)


def test_a_spawned_rank_missing_between_two_that_run_is_gone() -> None:
    """Rank 1 of 3 exited (sys.exit(0)) before init_process_group; ranks 0 and 2 wait there
    (i_d20_spawn_exit_early; MASTER_ADDR set inside the worker, so not in its environment)."""
    picture = _spawned("i_d20_spawn_exit_early", (0, 2), 3, "")
    assert picture.diagnoses[0].entry == "D20" and picture.suspect_ranks == (1,), _says(picture)


def test_ranks_at_the_same_line_in_different_epochs_drifted_apart() -> None:
    """Rank 1's shard makes 3 batches an epoch, rank 0's 20 (i_d9_generator_pairs): gloo pairs the
    epoch's loss all_reduce of rank 1 with a gradient all_reduce of rank 0, and both end up
    waiting at the gradient all_reduce, in different epochs. The stacks alone are alike; the loop
    counters (py-spy --locals) tell rank 1 went through more epochs, on fewer batches each."""
    samples = []
    for r in range(2):
        text = (DUMPS / f"i_d9_generator_pairs_rank{r}.json").read_text(encoding="utf-8")
        counters = parse_dump(text.replace("{SCRIPTS}", str(DUMPS)), 100 + r, rank_of=True).counters
        assert ("epoch" in {name for _, name, _ in counters}) and not parse_dump(text, 100 + r).counters
        samples.append(replace(_rank("i_d9_generator_pairs", r, 2), counters=counters))
    picture = analyse(samples)
    assert picture.diagnoses[0].entry == "D9" and picture.suspect_ranks == (1,), _says(picture)
    assert "for epoch in range(10)" in picture.diagnoses[0].evidence[0]
    # without the counters the same stacks name nobody
    assert _job("i_d9_generator_pairs").suspect_ranks == ()


def test_a_rank_whose_executor_joins_its_workers_at_exit_has_ended() -> None:
    """The main thread raised (a DataLoader worker's error) and sits in threading's `_shutdown`
    under a ThreadPoolExecutor's exit hook, joining a task that polls for ever: a crashed rank."""
    state = classify(_rank("s_d20_loader_worker_error_uploader", 1, 2))
    assert state.kind == "exited" and "script ended" in state.detail, state
    picture = _job("s_d20_loader_worker_error_uploader")
    assert picture.diagnoses[0].entry == "D20" and picture.suspect_ranks == (1,), _says(picture)


def test_an_outer_counting_loop_left_under_a_rank_test_is_a_rank_local_decision() -> None:
    """Early stopping decided on rank 0 only: its `break` leaves `for epoch in range(100)` under
    `if rank == 0:` while ranks 1, 2 are in the inner `for _ in range(30)`: not out of data."""
    picture = _job("s_d19_rank0_early_stop_break")
    assert picture.diagnoses[0].entry == "D19" and picture.suspect_ranks == (0,), _says(picture)
    assert "break" in picture.diagnoses[0].evidence[0]


def test_a_rank_that_took_none_of_the_paired_rank_conditional_barriers_is_the_odd_one() -> None:
    """`if local_rank not in [-1, 0]: barrier()` then `if dist.get_rank() == 0: barrier()` on two
    simulated nodes: ranks 1, 3 and 0 meet in barrier() at two lines; rank 2 (local rank 0 of
    the second node) passed both and waits in all_reduce."""
    picture = _job("s_d21_local_rank_barrier_mixed", "python")
    assert picture.diagnoses[0].entry == "D21" and picture.suspect_ranks == (2,), _says(picture)
    assert "neither branch" in picture.diagnoses[0].evidence[0]
