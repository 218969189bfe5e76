"""The mechanisms session 13b's train evidence needed (eval/lint/README.md, "Session 13b"), quoting the
real code of train-split files: the finding appears for the real idiom and goes away for its fix or a
near miss."""

from __future__ import annotations

import textwrap

from triage.core.lint import lint_source


def found(body: str, code: str) -> list[str]:
    return [f.code for f in lint_source(textwrap.dedent(body), "module.py") if f.code == code]


# CarperAI/trlx before 2318d04 (MIT): the trainer's own `save_pretrained` passes its `**kwargs` on to
# the unwrapped model's, and nothing in the file hands it `is_main_process=`: every rank writes.
TRLX = """
    import os
    from accelerate import Accelerator

    class AccelerateRLTrainer:
        def __init__(self, config, model):
            self.accelerator = Accelerator()
            self.model = self.accelerator.prepare(model)

        def save_pretrained(self, directory=None, **kwargs):
            if directory is None:
                directory = os.path.join(self.config.train.checkpoint_dir, "hf_model")
            self.accelerator.wait_for_everyone()
            self.accelerator.unwrap_model(self.model).save_pretrained(directory, **kwargs)
            if self.accelerator.is_main_process:
                self.tokenizer.save_pretrained(directory)

        def learn(self):
            for batch in self.loader:
                self.step(batch)
            self.save_pretrained("final")
"""

# The fix: the save decides which process writes.
TRLX_FIXED = TRLX.replace(
    ".save_pretrained(directory, **kwargs)",
    ".save_pretrained(directory, is_main_process=self.accelerator.is_main_process, **kwargs)",
)


def test_a_save_pretrained_that_passes_on_the_functions_own_kwargs_writes_on_every_rank() -> None:
    assert found(TRLX, "TRG023") == ["TRG023"]
    assert found(TRLX_FIXED, "TRG023") == []


def test_passed_on_kwargs_are_trusted_when_a_caller_in_the_file_chooses_the_writer() -> None:
    chosen = TRLX.replace(
        'self.save_pretrained("final")',
        'self.save_pretrained("final", is_main_process=self.accelerator.is_main_process)',
    )
    assert found(chosen, "TRG023") == []
    opaque = TRLX.replace('self.save_pretrained("final")', 'self.save_pretrained("final", **options)')
    assert found(opaque, "TRG023") == []


def test_a_call_of_the_files_own_save_pretrained_method_is_judged_inside_it() -> None:
    # trlx at HEAD: its `learn` calls `self.save_pretrained(directory)`, its own method, which passes
    # is_main_process itself.
    assert found(TRLX_FIXED, "TRG023") == []


def test_a_converter_that_passes_options_on_runs_in_one_process() -> None:
    # hiyouga/EasyR1's scripts/model_merger.py: no wrapper, no Accelerator, a DTensor import.
    merger = """
        import torch
        from torch.distributed._tensor import DTensor

        def save_with_config(model, hf_path, generation_config, **kwargs):
            if generation_config is not None:
                model.generation_config = generation_config
            model.save_pretrained(hf_path, **kwargs)

        def main(local_dir, hf_path):
            model = load(local_dir)
            save_with_config(model, hf_path, None, safe_serialization=True)
    """
    assert found(merger, "TRG023") == []


# HRNet/DEKR tools/train.py before e375276 (MIT): the loader comes from the project's
# `make_dataloader(..., distributed=args.distributed)`, which shards with a DistributedSampler, and
# the epoch loop never gives it the epoch.
DEKR = """
    import torch
    import torch.distributed as dist
    from dataset import make_dataloader

    def main_worker(gpu, args, cfg):
        model = build_model(cfg)
        if args.distributed:
            dist.init_process_group(backend="nccl", rank=args.rank, world_size=args.world_size)
            model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[gpu])
        train_loader = make_dataloader(cfg, is_train=True, distributed=args.distributed)
        for epoch in range(begin_epoch, cfg.TRAIN.END_EPOCH):
            do_train(cfg, model, train_loader, loss_factory, optimizer, epoch)
"""


def test_a_helper_built_distributed_loader_fed_to_the_epochs_without_set_epoch() -> None:
    assert found(DEKR, "TRG022") == ["TRG022"]
    fixed = DEKR.replace(
        "        for epoch in range(begin_epoch, cfg.TRAIN.END_EPOCH):\n",
        "        for epoch in range(begin_epoch, cfg.TRAIN.END_EPOCH):\n"
        "            if args.distributed:\n"
        "                train_loader.sampler.set_epoch(epoch)\n",
    )
    assert found(fixed, "TRG022") == []


def test_a_helper_loader_not_told_distributed_or_not_for_training_is_left_alone() -> None:
    assert found(DEKR.replace("distributed=args.distributed", "distributed=False"), "TRG022") == []
    assert found(DEKR.replace("is_train=True", "is_train=False"), "TRG022") == []
    assert found(DEKR.replace("train_loader", "val_loader"), "TRG022") == []


def test_a_helper_loader_outside_an_epoch_loop_or_handed_to_a_runner_is_left_alone() -> None:
    steps = DEKR.replace("for epoch in range(", "for step in range(")
    assert found(steps, "TRG022") == []
    runner = DEKR.replace("do_train(cfg, model, train_loader", "engine.run(train_loader")
    assert found(runner, "TRG022") == []


def test_a_helper_loader_in_a_file_that_wraps_nothing_is_left_alone() -> None:
    unwrapped = DEKR.replace(
        "            model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[gpu])\n", ""
    )
    assert found(unwrapped, "TRG022") == []
