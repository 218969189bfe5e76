"""The mechanisms session 12b's train evidence needed (eval/lint/README.md, "Session 12b"), quoting the
real code of train-split files: the finding appears for the real idiom and goes away for its fix or a
near miss."""

from __future__ import annotations

import textwrap

from triage.core.lint import lint_source


def codes(body: str) -> list[str]:
    return [f.code for f in lint_source(textwrap.dedent(body), "module.py")]


# XPixelGroup/BasicSR before ce052ff: the tensorboard directory is renamed aside and made again on
# every rank by an imported helper whose name says what it does to the file system.
RENAMED = """
    import torch
    from mmcv.runner import get_dist_info, init_dist
    from basicsr.utils import make_exp_dirs, mkdir_and_rename

    def main(opt, resume_state):
        init_dist("pytorch")
        rank, world_size = get_dist_info()
        if resume_state is None and rank == 0:
            make_exp_dirs(opt)
        if resume_state is None:
            log_dir = "./tb_logger/" + opt["name"]
            mkdir_and_rename(log_dir)
        train(opt)

    if __name__ == "__main__":
        main(parse(), None)
"""


def test_an_imported_helper_that_renames_a_directory_on_every_rank() -> None:
    assert codes(RENAMED) == ["TRG023"]
    # the fix: rank 0 renames it
    fixed = RENAMED.replace(
        "        if resume_state is None:\n", "        if resume_state is None and rank == 0:\n"
    )
    assert codes(fixed) == []
    # near miss: a helper whose name says neither write nor rename (BasicSR's `make_exp_dirs` is
    # `@master_only` in its own module)
    assert codes(RENAMED.replace("mkdir_and_rename(log_dir)", "make_exp_dirs(log_dir)")) == []


# Project-MONAI/tutorials before af8d84fb: every rank writes the metric report into ./output.
REPORT = """
    import torch
    import torch.distributed as dist
    from monai.handlers import write_metrics_reports

    def evaluate(args):
        dist.init_process_group(backend="nccl", init_method="env://")
        result = compute(args)
        if args.local_rank == 0:
            print("mean dice:", result)
        write_metrics_reports(save_dir="./output", images=names(), metrics={"mean_dice": result})
        dist.destroy_process_group()

    if __name__ == "__main__":
        evaluate(parse())
"""


def test_an_imported_writer_handed_a_shared_directory() -> None:
    assert codes(REPORT) == ["TRG023"]
    # the fix: the report under the rank-0 test
    fixed = REPORT.replace(
        "        write_metrics_reports(",
        "        if args.local_rank == 0:\n            write_metrics_reports(",
    )
    assert codes(fixed) == []
    # near misses: a directory per rank; a writer whose result is used (it builds, not writes);
    # a call with no path among its arguments
    per_rank = REPORT.replace('save_dir="./output"', 'save_dir=f"./output/{args.local_rank}"')
    assert codes(per_rank) == []
    used = REPORT.replace("        write_metrics_reports(", "        report = write_metrics_reports(")
    assert codes(used) == []
    pathless = REPORT.replace('save_dir="./output", ', "")
    assert codes(pathless) == []


# LoongForge's precompute tool: the merged manifest is written by rank 0 when the job is
# distributed, and by the one process otherwise.
BRANCHES = """
    import torch
    import torch.distributed as dist
    from tools.manifest import get_is_master

    def finish(args, ctx, records):
        dist.init_process_group("nccl")
        if ctx.world_size > 1:
            if not get_is_master():
                return
            torch.save(records, "manifest.pt")
        else:
            torch.save(records, "manifest.pt")
        if not dist.is_initialized():
            torch.save(records, "single.pt")

    if __name__ == "__main__":
        finish(parse(), None, [])
"""


def test_the_single_process_branch_and_a_main_process_getter() -> None:
    assert codes(BRANCHES) == []
    # near miss: the else of a test that is not about the job being distributed
    other = BRANCHES.replace("if ctx.world_size > 1:", "if args.merge:")
    assert codes(other) == ["TRG023"]
    # and the getter's answer is what gates: without it rank 0 is not alone
    ungated = BRANCHES.replace("            if not get_is_master():\n                return\n", "")
    assert codes(ungated) == ["TRG023"]
