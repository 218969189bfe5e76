"""Mechanisms that session 11b's unseen scripts needed (eval/lint/README.md, "Session 11b"), each on
its own, quoting the real code of a train-split file. Each test shows the finding appear for the real
idiom and go away for its fixed neighbour (or the reverse, for a false positive removed)."""

from __future__ import annotations

import textwrap

from triage.core.lint import lint_source

TORCH = "import os\nimport shutil\nimport torch\nimport torch.distributed as dist\n"


def codes(body: str, head: str = TORCH) -> list[str]:
    return [f.code for f in lint_source(head + textwrap.dedent(body), "train.py")]


# hiyouga/LLaMA-Factory e7cb145f (#10156): a log handler built on every rank removes the shared log
# after testing that it exists; the fix catches the error the losers of the race get.
REMOVE = """
    def setup(output_dir):
        dist.init_process_group("nccl")
        running_log = os.path.join(output_dir, "running_log.txt")
        if os.path.exists(running_log):
            os.remove(running_log)

    if __name__ == "__main__":
        setup("out")
"""


def test_a_removal_after_an_existence_test_on_every_rank_is_a_race() -> None:
    assert "TRG023" in codes(REMOVE)
    fixed = REMOVE.replace(
        "        if os.path.exists(running_log):\n            os.remove(running_log)\n",
        "        try:\n            os.remove(running_log)\n        except OSError:\n            pass\n",
    )
    assert "TRG023" not in codes(fixed)
    # Gated to rank 0, or a path of this rank's own: not a shared file.
    assert "TRG023" not in codes(
        REMOVE.replace("if os.path.exists(", "if dist.get_rank() == 0 and os.path.exists(")
    )
    assert "TRG023" not in codes(REMOVE.replace('"running_log.txt"', 'f"log_{dist.get_rank()}.txt"'))
    # A plain removal with no existence test is not claimed (a process's own output, often).
    assert "TRG023" not in codes(REMOVE.replace("if os.path.exists(running_log):", "if True:"))


# ModelTC/LightX2V fastwam.py: a temporary file written then renamed, removed in `finally:` if it
# is still there: this process's own clean-up, not a shared file.
CLEANUP = """
    def save(payload, path):
        dist.init_process_group("nccl")
        temporary_path = path + ".partial"
        try:
            torch.save(payload, temporary_path)
            os.replace(temporary_path, path)
        finally:
            if os.path.exists(temporary_path):
                os.remove(temporary_path)
"""


def test_a_clean_up_in_finally_is_not_reported_as_a_shared_removal() -> None:
    found = [f for f in lint_source(TORCH + textwrap.dedent(CLEANUP), "train.py") if f.code == "TRG023"]
    assert not any("remove" in f.message for f in found)


# OpenAccess-AI-Collective/axolotl 31f3e717 (#481): a TrainerCallback's on_save moves the last full
# checkpoint's shards on every rank; the module's only distributed sign is the project's
# `is_main_process`, which it asks elsewhere.
RELORA = """
    import glob
    import os
    import shutil

    from transformers import TrainerCallback

    from axolotl.utils.distributed import is_main_process


    class ReLoRACallback(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            save(actually_save=is_main_process())

        def on_save(self, args, state, control, **kwargs):
            for path in glob.glob(f"{self.last_full_model}/model*.safetensors"):
                shutil.move(path, args.output_dir)
"""


def test_a_callback_hook_moving_shared_files_runs_on_every_rank() -> None:
    assert "TRG023" in codes(RELORA, head="")
    fixed = RELORA.replace(
        "            for path in glob",
        "            if not is_main_process():\n                return\n            for path in glob",
    )
    assert "TRG023" not in codes(fixed, head="")
    # Without the project's main-process test the module says nothing about processes.
    alone = RELORA.replace("from axolotl.utils.distributed import is_main_process", "").replace(
        "save(actually_save=is_main_process())", "pass"
    )
    assert codes(alone, head="") == []
    # A class that is no framework callback: its methods run where its (unseen) builder runs them.
    plain = RELORA.replace("class ReLoRACallback(TrainerCallback):", "class ReLoRA:")
    assert "TRG023" not in codes(plain, head="")


# hiyouga/LLaMA-Factory src/llamafactory/train/callbacks.py: `if args.should_save:` is the HF
# TrainingArguments' "this process writes" (the main process); `control.should_save` is the
# TrainerControl's "this step saves", true on every rank alike.
SHOULD_SAVE = """
    from transformers import TrainerCallback

    class PissaConvertCallback(TrainerCallback):
        def on_train_begin(self, args, state, control, model=None, **kwargs):
            if args.should_save:
                model.save_pretrained(os.path.join(args.output_dir, "pissa_init"))

    dist.init_process_group("nccl")
"""


def test_the_training_arguments_should_save_is_the_main_process() -> None:
    assert "TRG023" not in codes(SHOULD_SAVE)
    assert "TRG023" in codes(SHOULD_SAVE.replace("if args.should_save:", "if control.should_save:"))


# FAIR-Chem/fairchem d24fc7dd ocpmodels/trainers/forces_trainer.py: after the base class placed the
# model, a project wrapper is handed the device by keyword before DDP wraps it.
WRAPPED = """
    from torch.nn.parallel import DistributedDataParallel
    from ocpmodels.common.data_parallel import OCPDataParallel

    class ForcesTrainer:
        def load_model(self):
            self.model = OCPDataParallel(self.model, output_device=self.device, num_gpus=1)
            self.model = DistributedDataParallel(self.model, device_ids=[self.device])

    dist.init_process_group("nccl")
"""


def test_a_project_wrapper_handed_a_device_by_keyword_is_not_a_cpu_module() -> None:
    assert "TRG004" not in codes(WRAPPED)
    assert "TRG004" in codes(WRAPPED.replace(", output_device=self.device, num_gpus=1", ""))
