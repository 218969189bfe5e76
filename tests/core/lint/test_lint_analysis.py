"""The analysis under the rules: rank values and conditions in their common spellings, gates, one
level of calls, wrappers, mp.spawn, suppression comments, selection, bad sources, launch lines."""

from __future__ import annotations

import textwrap

import pytest

from triage.core.lint import LaunchFacts, Selection, SourceError, decode_source, find_launches, lint_source

HEAD = "import torch\nimport torch.distributed as dist\n"


def found(body: str, head: str = HEAD, **kwargs: object) -> list[tuple[str, int]]:
    source = head + textwrap.dedent(body)
    return [(f.code, f.line - head.count("\n")) for f in lint_source(source, "train.py", **kwargs)]  # type: ignore[arg-type]


def codes(body: str, head: str = HEAD) -> set[str]:
    return {code for code, _ in found(body, head)}


@pytest.mark.parametrize(
    "condition",
    [
        "dist.get_rank() == 0",
        "0 == dist.get_rank()",
        "rank == 0",
        "is_main",
        "not rank",
        "rank < 1",
        "local_rank in (-1, 0)",
        "args.local_rank in [-1, 0]",
        "int(os.environ['RANK']) == 0",
        "accelerator.is_main_process",
        "accelerator.is_local_main_process",
        "trainer.is_global_zero",
        "trainer.is_world_process_zero()",
        "master_process",
        "helper_is_main()",
        "not args.distributed or rank == 0",
        "rank == 0 and epoch % 10 == 0",
        "rank != 0",
        "local_rank > 0",
    ],
)
def test_rank_conditions_in_their_spellings(condition: str) -> None:
    body = f"""
    import os
    rank = dist.get_rank()
    local_rank = int(os.environ["LOCAL_RANK"])
    is_main = rank == 0
    master_process = rank == 0
    def helper_is_main():
        return dist.get_rank() == 0
    if {condition}:
        dist.barrier()
    """
    assert ("TRG021", 10) in found(body), condition


@pytest.mark.parametrize(
    "condition",
    [
        "local_rank != -1",
        "args.local_rank == -1",
        "world_size > 1",
        "dist.is_initialized()",
        "epoch % 10 == 0",
    ],
)
def test_conditions_every_rank_agrees_on_gate_nothing(condition: str) -> None:
    body = f"""
    import os
    local_rank = int(os.environ["LOCAL_RANK"])
    world_size = dist.get_world_size()
    if {condition}:
        dist.barrier()
    """
    assert "TRG021" not in codes(body)


def test_an_else_and_an_early_exit_are_gated_too() -> None:
    body = """
    rank = dist.get_rank()
    if rank == 0:
        print("main")
    else:
        dist.all_reduce(t)
    def report(t):
        if dist.get_rank() != 0:
            return
        dist.broadcast(t, 0)
    """
    assert found(body) == [("TRG021", 6), ("TRG021", 10)]


def test_negating_a_mixed_condition_gates_nothing() -> None:
    """`else` of `is_main and step % 10 == 0` runs on every rank at most steps."""
    body = """
    is_main = dist.get_rank() == 0
    for step in range(100):
        if is_main and step % 10 == 0:
            print("log")
        else:
            dist.all_reduce(t)
        if is_main and step == 5:
            continue
        dist.barrier()
    """
    assert "TRG021" not in codes(body)


def test_helpers_are_followed_three_calls_deep_and_no_further() -> None:
    # Real code reaches its collective through helpers of helpers (a final eval that calls a
    # scoring helper that runs the DDP model; a download helper's barrier under a config writer).
    body = """
    def sync():
        dist.barrier()
    def outer():
        sync()
    def outermost():
        outer()
    def too_deep():
        outermost()
    if dist.get_rank() == 0:
        sync()
        outer()
        outermost()
        too_deep()
    """
    assert found(body) == [("TRG021", 11), ("TRG021", 12), ("TRG021", 13)]


def test_a_helper_only_called_on_rank_0_is_not_a_finding_inside() -> None:
    body = """
    def save(model):
        torch.save(model.state_dict(), "m.pt")
    if dist.get_rank() == 0:
        save(model)
    torch.save(model.state_dict(), "again.pt")
    """
    assert found(body) == [("TRG023", 6)]


def test_rank_zero_only_functions_are_gated() -> None:
    head = HEAD + "from lightning.pytorch.utilities import rank_zero_only\n"
    body = """
    @rank_zero_only
    def log_and_wait():
        dist.barrier()
    """
    assert found(body, head) == [("TRG021", 4)]


def test_the_others_wait_rank_0_releases_pair_is_balanced() -> None:
    body = """
    def main(args):
        if args.local_rank not in [-1, 0]:
            torch.distributed.barrier()
        prepare()
        if args.local_rank == 0:
            torch.distributed.barrier()
    """
    assert found(body) == []


def test_a_collective_with_an_explicit_group_is_only_a_warning() -> None:
    body = """
    if dist.get_rank() == 0:
        dist.all_reduce(t, group=first_stage)
    """
    assert found(body) == [("TRG036", 3)]


def test_wrapped_models_under_a_gate() -> None:
    head = HEAD + (
        "from torch.nn.parallel import DistributedDataParallel as DDP\n"
        "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
    )
    body = """
    ddp = DDP(net, device_ids=[0])
    sharded = FSDP(net, auto_wrap_policy=policy)
    def evaluate(m, batch):
        return m(batch)
    if dist.get_rank() == 0:
        ddp(x)
        sharded(x)
        ddp.module(x)
        evaluate(sharded, x)
        evaluate(ddp.module, x)
    """
    assert found(body, head) == [("TRG036", 7), ("TRG021", 8), ("TRG021", 10)]


def test_accelerate_and_deepspeed_collectives() -> None:
    head = HEAD + "import deepspeed\nfrom accelerate import Accelerator\n"
    body = """
    accelerator = Accelerator()
    engine, _, _, _ = deepspeed.initialize(model=net, config=cfg)
    if accelerator.is_main_process:
        accelerator.wait_for_everyone()
        engine.save_checkpoint("ckpt")
        accelerator.save_state("state")
    """
    assert found(body, head) == [("TRG021", 5), ("TRG021", 6), ("TRG036", 7)]


def test_spawn_workers_get_local_indices_and_the_launcher_is_not_per_rank() -> None:
    head = HEAD + "import torch.multiprocessing as mp\n"
    body = """
    def setup(rank, world):
        torch.cuda.set_device(rank)
    def worker(rank, world):
        setup(rank, world)
        torch.save({}, "w.pt")
    def main():
        torch.save({}, "launcher.pt")
        mp.spawn(worker, args=(2,), nprocs=2)
    """
    assert found(body, head) == [("TRG023", 6)]


def test_a_global_rank_passed_to_a_helper_is_still_global() -> None:
    body = """
    import os
    def place(index):
        return torch.nn.Linear(2, 2).to(index)
    rank = int(os.environ["RANK"])
    place(rank)
    """
    assert found(body) == [("TRG003", 4)]


def test_rank_dependent_loop_lengths() -> None:
    head = HEAD + "from torch.nn.parallel import DistributedDataParallel as DDP\n"
    body = """
    model = DDP(net)
    rank = dist.get_rank()
    batches = [torch.randn(4) for _ in range(3 + rank)]
    for b in batches:
        model(b).sum().backward()
    for b in range(10):
        model(b).sum().backward()
    """
    assert found(body, head) == [("TRG009", 5)]


def test_ignore_comments_silence_their_line_only() -> None:
    body = """
    if dist.get_rank() == 0:
        dist.barrier()  # triage: ignore[TRG021]
        dist.all_reduce(t)  # triage: ignore
        dist.broadcast(t, 0)  # triage: ignore[TRG023]
        s = "# triage: ignore"; dist.gather(t)
    """
    assert found(body) == [("TRG021", 5), ("TRG021", 6)]


def test_selection_by_code_and_prefix() -> None:
    body = """
    dist.init_process_group("nccl")
    if dist.get_rank() == 0:
        prepare_data()
        dist.barrier()
    dist.barrier()
    """
    assert {c for c, _ in found(body)} == {"TRG021", "TRG040"}
    assert {c for c, _ in found(body, selection=Selection(select=("TRG02",)))} == {"TRG021"}
    assert {c for c, _ in found(body, selection=Selection(ignore=("TRG021",)))} == {"TRG040"}


def test_a_launch_with_restarts_makes_a_missing_resume_a_finding() -> None:
    body = "for step in range(10):\n    train_step(step)\n"
    assert found(body, "") == []
    launch = LaunchFacts(3, "run.sh:2")
    assert found(body, "", launch=launch) == [("TRG041", 1)]
    resumed = "import torch\nstate = torch.load('s.pt', map_location='cpu')\n" + body
    assert found(resumed, "", launch=launch) == []


def test_launch_lines_in_shell_scripts() -> None:
    text = (
        "#!/bin/bash\n"
        "# torchrun --max-restarts=9 commented.py\n"
        "torchrun --nnodes=2 --nproc-per-node 8 \\\n"
        "    --max-restarts=3 --rdzv-endpoint=$HEAD:29400 train.py --lr 0.1\n"
        "python -m torch.distributed.run --max_restarts 2 -m pkg.train\n"
        "torchrun $ARGS --max-restarts=$N other.py\n"
        "torchrun --standalone --nproc-per-node=2 plain.py\n"
    )
    launches = [(launch.line, launch.script, launch.max_restarts) for launch in find_launches(text)]
    assert launches == [(3, "train.py", 3), (5, "-m pkg.train", 2), (6, "other.py", 1), (7, "plain.py", 0)]


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"x = (\n", "train.py:1: syntax error"),
        (b"\x7fELF\x00\x01", "train.py: a binary file, not Python source"),
        (b"print('\xff')\n", "train.py: not UTF-8 text (byte 0xff at offset 7)"),
    ],
)
def test_sources_that_are_not_python_are_one_line_errors(data: bytes, problem: str) -> None:
    with pytest.raises(SourceError) as caught:
        lint_source(decode_source(data, "train.py"), "train.py")
    assert str(caught.value).startswith(problem) and "\n" not in str(caught.value)


def test_a_coding_line_is_honoured() -> None:
    text = decode_source("# -*- coding: latin-1 -*-\nname = 'é'\n".encode("latin-1"), "train.py")
    assert "é" in text
