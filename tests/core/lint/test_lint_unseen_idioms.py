"""Mechanisms that the scripts collected in session 6 (none of which the rules had seen) needed, each
on its own, quoting the real code (eval/lint/README.md, "Session 6"). Each test shows the finding
going away for the real idiom and staying for the bug next to it."""

from __future__ import annotations

import textwrap

from triage.core.lint import lint_source

HEAD = "import os\nimport shutil\nimport torch\nimport torch.distributed as dist\n"


def codes(body: str, head: str = HEAD) -> list[str]:
    return [f.code for f in lint_source(head + textwrap.dedent(body), "train.py")]


def test_a_writer_handed_to_a_function_gates_what_runs_under_it() -> None:
    # LTH14/mar engine_mar.py: main_mar.py creates the SummaryWriter on rank 0 only and passes None
    # elsewhere; evaluate() removes its temporary image folder under `if log_writer is not None:`.
    body = """
        dist.init_process_group("nccl")
        def evaluate(model, save_folder, log_writer=None):
            model.generate(save_folder)
            torch.distributed.barrier()
            if log_writer is not None:
                log_writer.add_scalar("fid", 1.0, 0)
                shutil.rmtree(save_folder)
            torch.distributed.barrier()
        evaluate(None, "ariter64-diffsteps100", log_writer=None)
    """
    assert "TRG023" not in codes(body)
    assert "TRG023" in codes(body.replace("if log_writer is not None:", "if True:"))


def test_a_writer_made_in_the_same_function_is_not_taken_for_a_gate() -> None:
    body = """
        from torch.utils.tensorboard import SummaryWriter
        dist.init_process_group("nccl")
        def evaluate(save_folder):
            log_writer = SummaryWriter(save_folder)
            if log_writer is not None:
                shutil.rmtree(save_folder)
        evaluate("out")
    """
    assert "TRG023" in codes(body)


def test_is_local_master_gates_like_the_local_main_process() -> None:
    # FoundationVision/VAR train.py saves its checkpoint under `if dist.is_local_master():` (VAR's
    # own dist module): once per node, as under `local_rank == 0`.
    body = """
        dist.init_process_group("nccl")
        for ep in range(10):
            train_one_epoch(ep)
            if dist.is_local_master():
                local_out_ckpt = os.path.join(out_dir, "ar-ckpt-last.pth")
                torch.save({"epoch": ep + 1}, local_out_ckpt)
    """
    assert "TRG023" not in codes(body)
    assert "TRG023" in codes(body.replace("if dist.is_local_master():", "if ep % 2 == 0:"))
