"""The mechanism session 12c's train evidence needed (eval/lint/README.md, "Session 12c"), quoting the
real code of a train-split file: the finding appears for the real idiom and goes away for its fix or a
near miss."""

from __future__ import annotations

import textwrap

from triage.core.lint import lint_source


def codes(body: str) -> list[str]:
    return [f.code for f in lint_source(textwrap.dedent(body), "module.py")]


# lucidrains/DALLE2-pytorch before 478d8b8: the evaluation runs on the master only, and a torchmetrics
# metric's compute() gathers its state from every process once the process group is up.
EVALUATED = """
    import torch
    from accelerate import Accelerator
    from torchmetrics.image.fid import FrechetInceptionDistance

    def evaluate_trainer(trainer, real_images, generated_images, device, FID=None):
        metrics = {}
        if FID is not None:
            fid = FrechetInceptionDistance(**FID)
            fid.to(device=device)
            fid.update(real_images, real=True)
            fid.update(generated_images, real=False)
            metrics["FID"] = fid.compute().item()
        return metrics

    def train(trainer, accelerator, images, samples, device, evaluate_config):
        is_master = accelerator.process_index == 0
        for epoch in range(10):
            trainer.train_step(images)
            if is_master:
                evaluation = evaluate_trainer(trainer, images, samples, device, **evaluate_config)
                print(evaluation)

    if __name__ == "__main__":
        accelerator = Accelerator()
        train(None, accelerator, None, None, accelerator.device, {})
"""


def test_a_torchmetrics_compute_reached_on_the_master_only() -> None:
    assert codes(EVALUATED) == ["TRG036"]
    # the fix: the metric does not synchronise (a no-op dist_sync_fn, or sync_on_compute=False)
    assert codes(EVALUATED.replace("(**FID)", "(**FID, dist_sync_fn=null_sync)")) == []
    assert codes(EVALUATED.replace("(**FID)", "(**FID, sync_on_compute=False)")) == []
    # near misses: every process evaluates; a compute() of something torchmetrics did not build
    assert "TRG036" not in codes(EVALUATED.replace("            if is_master:\n", "            if True:\n"))
    assert codes(EVALUATED.replace("from torchmetrics.image.fid import", "from my_metrics import")) == []


# pyg-team/pytorch_geometric's mag240m example (a snapshot file, not a set): the metric is an
# attribute-free local, computed under `if rank == 0:` of an NCCL job.
ACCURACY = """
    import torch.distributed as dist
    from torchmetrics import Accuracy

    def run(rank, world_size, loader, model):
        dist.init_process_group("nccl", rank=rank, world_size=world_size)
        acc = Accuracy(task="multiclass", num_classes=10)
        for batch in loader:
            acc(model(batch.x), batch.y)
        if rank == 0:
            print(f"Train Acc: {acc.compute():.4f}")
        acc.reset()
"""


def test_a_local_metric_computed_under_a_rank_test() -> None:
    assert codes(ACCURACY) == ["TRG036"]
    fixed = ACCURACY.replace(
        '        if rank == 0:\n            print(f"Train Acc: {acc.compute():.4f}")\n',
        '        value = acc.compute()\n        if rank == 0:\n            print(f"Train Acc: {value:.4f}")\n',
    )
    assert codes(fixed) == []
