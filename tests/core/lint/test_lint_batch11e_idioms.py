"""The mechanisms session 11e's train evidence needed (eval/lint/README.md, "Session 11e"), quoting the
real code of train-split files: the finding appears for the real idiom and goes away for its fix."""

from __future__ import annotations

import textwrap

from triage.core.lint import lint_source


def codes(body: str, head: str = "") -> list[str]:
    return [f.code for f in lint_source(head + textwrap.dedent(body), "module.py")]


# fairchem d3764e40 (#102): a trainer class tests `distutils.is_master()` in its constructor, and its
# `train` hands a checkpoint of state_dict()s to the project's `save_checkpoint` on every rank.
TRAINER = """
    from torch.utils.data import DistributedSampler
    from ocpmodels.common import distutils
    from ocpmodels.common.utils import save_checkpoint

    class EnergyTrainer:
        def __init__(self, config):
            self.config = config
            if distutils.is_master():
                print(config)

        def train(self):
            for i, batch in enumerate(self.train_loader):
                if i % self.config["cmd"]["print_every"] == 0:
                    self.log(i)
            save_checkpoint(
                {"state_dict": self.model.state_dict(), "optimizer": self.optimizer.state_dict()},
                self.config["cmd"]["checkpoint_dir"],
            )
"""


def test_a_checkpoint_of_state_dicts_handed_to_a_save_helper_in_a_rank_testing_class_is_reported() -> None:
    assert codes(TRAINER) == ["TRG023"]
    # the fix: the save under the class's own main-process test
    fixed = TRAINER.replace(
        "            save_checkpoint(", "            if distutils.is_master(): save_checkpoint("
    )
    assert codes(fixed) == []


def test_a_helper_whose_name_says_rank_0_saves_or_an_object_method_is_not_a_write() -> None:
    # DeiT's `utils.save_on_master({...})` says who writes.
    on_master = TRAINER.replace("            save_checkpoint(", "            utils.save_on_master(").replace(
        "from ocpmodels.common.utils import save_checkpoint", "from ocpmodels.common import utils"
    )
    assert codes(on_master) == []
    # DeepSpeed's `model.save_checkpoint(dir, client_state={...})`: every rank must call it.
    engine = TRAINER.replace("            save_checkpoint(", "            self.engine.save_checkpoint(")
    assert codes(engine) == []


def test_a_checkpoint_in_a_class_with_no_rank_test_is_not_judged() -> None:
    # a library class: nothing in the file says on which ranks `train` runs
    assert codes(TRAINER.replace("distutils.is_master()", "config.verbose")) == []


def test_a_cadence_test_is_no_process_test_of_the_method() -> None:
    # `if i % n == 0:` is not a rank test; `if self.rank == 0:` would be one, and its own gate
    own_gate = TRAINER.replace('i % self.config["cmd"]["print_every"] == 0', "self.worker_id == 0")
    assert codes(own_gate) == []


# habitat-lab's PPOTrainer: `rank0_only()` is a main-process decorator that, called with nothing to
# wrap, answers whether this is rank 0.
HABITAT = """
    import os
    import torch.distributed as dist
    from habitat_baselines.rl.ddppo.ddp_utils import rank0_only

    dist.init_process_group("nccl")
    if rank0_only() and not os.path.isdir(checkpoint_folder):
        os.makedirs(checkpoint_folder)
"""


def test_a_main_process_decorator_called_bare_is_a_rank_0_test() -> None:
    assert codes(HABITAT) == []
    # without the test, every rank races into FileExistsError
    assert codes(HABITAT.replace("rank0_only() and ", "")) == ["TRG023"]


def test_a_distributed_checkpoint_save_of_state_dicts_is_every_rank_s_own() -> None:
    # torch.distributed.checkpoint.save: each rank writes its shards, and every rank must call it
    dcp = TRAINER.replace("            save_checkpoint(", "            dcp.save(").replace(
        "from ocpmodels.common.utils import save_checkpoint", "import torch.distributed.checkpoint as dcp"
    )
    assert codes(dcp) == []


def test_a_method_that_does_not_train_is_left_to_its_callers() -> None:
    # diffusion-pipe's `save_adapter`: called from the training script under its own rank test
    helper = TRAINER.replace(
        "for i, batch in enumerate(self.train_loader):", "for i, batch in enumerate(self.items):"
    )
    assert codes(helper) == []
