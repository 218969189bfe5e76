"""The mechanism session 12e's train evidence needed (eval/lint/README.md, "Session 12e"), quoting the
real code of a train-split file: the finding appears for the real idiom and goes away for its fix or a
near miss."""

from __future__ import annotations

import textwrap

from triage.core.lint import lint_source


def writes(body: str) -> list[str]:
    """The TRG023 findings (the quoted trainer also indexes GPUs by global rank: TRG003, not this)."""
    return [f.code for f in lint_source(textwrap.dedent(body), "module.py") if f.code == "TRG023"]


# PlayVoice/so-vits-svc-5.0 before 47ee14b: keep-last-k pruning of the checkpoint folder on every
# process; each lists the same folder and removes the same old files.
PRUNED = """
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    def train(rank, args, pth_dir, keep):
        dist.init_process_group("nccl", rank=rank, world_size=args.world_size)
        torch.cuda.set_device(rank)
        model = DistributedDataParallel(build().to(rank), device_ids=[rank])
        for epoch in range(args.epochs):
            train_one_epoch(model)
            if rank == 0:
                torch.save({"model": model.module.state_dict()}, f"{pth_dir}/{args.name}_{epoch}.pt")

            def clean_checkpoints(path_to_models=pth_dir, n_ckpts_to_keep=keep):
                ckpts = [f for f in os.listdir(path_to_models) if f.startswith(args.name)]
                to_del = [os.path.join(path_to_models, f) for f in sorted(ckpts)[:-n_ckpts_to_keep]]
                del_routine = lambda x: os.remove(x)
                rs = [del_routine(fn) for fn in to_del]

            clean_checkpoints()
"""


def test_checkpoints_pruned_from_a_listing_on_every_rank() -> None:
    assert writes(PRUNED) == ["TRG023"]
    # the fix: the pruning runs on rank 0 only
    fixed = PRUNED.replace(
        "            clean_checkpoints()", "            if rank == 0:\n                clean_checkpoints()"
    )
    assert writes(fixed) == []
    # near misses: no listing (a removal of a path named once is not an existence test); a folder of
    # the rank's own; a glob over the folder is a listing too
    unlisted = PRUNED.replace(
        "[f for f in os.listdir(path_to_models) if f.startswith(args.name)]", "list(names)"
    )
    assert writes(unlisted) == []
    own = PRUNED.replace("os.remove(x)", "os.remove(f'{x}.{rank}')")
    assert writes(own) == []
    globbed = PRUNED.replace("os.listdir(path_to_models)", "glob.glob(path_to_models + '/*')").replace(
        "import os\n", "import glob\n    import os\n"
    )
    assert writes(globbed) == ["TRG023"]
