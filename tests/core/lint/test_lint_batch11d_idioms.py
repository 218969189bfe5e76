"""The mechanisms session 11d's train evidence needed (eval/lint/README.md, "Session 11d"), quoting the
real code of train-split files: the finding appears for the real idiom and goes away for its fix."""

from __future__ import annotations

import textwrap

from triage.core.lint import lint_source


def codes(body: str, head: str = "") -> list[str]:
    return [f.code for f in lint_source(head + textwrap.dedent(body), "module.py")]


# pytorch/xla 85143432 (#7296): a checkpoint manager's `_save` deletes the step's directory through a
# helper before its own `if dist.get_rank(self.pg) == 0:`; the helper removes the tree on every rank.
MANAGER = """
    import torch.distributed as dist
    from fsspec.core import url_to_fs

    class CheckpointManager:
        def _delete_chkpt_at_step(self, step):
            fs, raw_path = url_to_fs(self._get_path(step))
            if fs.exists(raw_path):
                fs.rm(raw_path, recursive=True)

        def _save(self, step, state_dict):
            self._delete_chkpt_at_step(step)
            write(state_dict, self._get_path(step))
            if dist.get_rank(self.pg) == 0:
                self._release_oldest_checkpoints()
"""


def test_a_tree_removed_by_a_helper_its_rank_testing_caller_runs_on_every_rank_is_reported() -> None:
    assert codes(MANAGER) == ["TRG023"]
    # the fix: the helper's removal under the caller's rank test
    gated = MANAGER.replace(
        "            self._delete_chkpt_at_step(step)\n",
        "            if dist.get_rank(self.pg) == 0:\n                self._delete_chkpt_at_step(step)\n",
    )
    assert "TRG023" not in codes(gated)
    # one file at a time (no recursive=True, no existence test) is not a tree removal
    assert "TRG023" not in codes(MANAGER.replace("fs.rm(raw_path, recursive=True)", "fs.rm(raw_path)"))
    # a caller that never tests the rank does not say on which ranks the helper runs
    assert codes(MANAGER.replace("if dist.get_rank(self.pg) == 0:", "if step > 0:")) == []


def test_a_filesystem_rmtree_on_every_rank_is_reported_like_shutils() -> None:
    body = """
        import torch.distributed as dist
        import tensorflow as tf
        dist.init_process_group("nccl")
        tf.io.gfile.rmtree(out_dir)
    """
    assert codes(body) == ["TRG023"]
    gated = body.replace(
        "tf.io.gfile.rmtree(out_dir)", "if dist.get_rank() == 0:\n            tf.io.gfile.rmtree(out_dir)"
    )
    assert codes(gated) == []


# baidu-baige/LoongForge 6b3845b2: a trainer module with only project imports; `no_sync` wraps the
# backward alone, in a helper handed the loss, so DDP has already decided to all-reduce.
TRAINER = """
    from project.trainers import BaseTrainer

    class FinetuneTrainer(BaseTrainer):
        def _backward_loss(self, loss, sync_grads):
            if self.ctx.is_distributed and not sync_grads:
                if hasattr(self.model, "no_sync"):
                    with self.model.no_sync():
                        loss.backward()
            else:
                loss.backward()
"""


def test_a_model_no_sync_says_the_module_runs_distributed() -> None:
    assert codes(TRAINER) == ["TRG054"]
    # without `no_sync` nothing here says there are several processes
    assert codes(TRAINER.replace("with self.model.no_sync():", "if True:")) == []
    # accelerate's `accelerator.no_sync(model)` takes the model as an argument: no sign by itself
    assert codes(TRAINER.replace("self.model.no_sync()", "self.accel.no_sync(self.model)")) == []
