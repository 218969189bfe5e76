"""Mechanisms that session 9b's unseen scripts needed (eval/lint/README.md, "Session 9b"), each on
its own, quoting the real code of a train-split file. Each test shows the finding appear for the real
idiom and go away for the code next to it."""

from __future__ import annotations

from tests.core.lint import test_lint_unseen_idioms as unseen

HEAD = "import contextlib\nimport os\nimport torch\n"


def codes(body: str) -> list[str]:
    return unseen.codes(body, HEAD)


def test_a_no_sync_manager_chosen_before_the_with_is_still_no_sync() -> None:
    # ClassyVision before 14d6c3b: `run_optimizer` picks the manager, then holds only the backward
    # in it; the forward ran in `train_step`, outside (the fix moved `no_sync` out to cover both).
    body = """
        import torch.distributed as dist
        class ClassificationTask:
            def train_step(self, sample):
                output = self.distributed_model(sample["input"])
                self.run_optimizer(self.compute_loss(output, sample))

            def run_optimizer(self, loss):
                do_step = self.num_updates % self.optimizer_period == self.optimizer_period - 1
                ctx_mgr_model = (
                    self.distributed_model.no_sync()
                    if self.distributed_model is not None and not do_step
                    else contextlib.suppress()
                )
                with ctx_mgr_model:
                    loss.backward()
                if do_step:
                    self.optimizer.step()
    """
    assert codes(body).count("TRG054") == 1
    # The forward inside the chosen manager (ClassyVision after the fix) is what no_sync needs.
    fixed = body.replace(
        "                with ctx_mgr_model:\n                    loss.backward()",
        "                with ctx_mgr_model:\n                    out = self.distributed_model(x)\n"
        "                    out.sum().backward()",
    )
    assert "TRG054" not in codes(fixed)


def test_a_helper_of_the_file_called_in_no_sync_may_run_the_forward() -> None:
    # parler-tts' training loop: `ctx = model.no_sync if ... else contextlib.nullcontext`, and the
    # forward runs in the script's own `train_step`, which the block calls without naming the model.
    body = """
        import torch.distributed as dist
        def train_step(batch):
            return model(**batch).loss
        for i, batch in enumerate(batch_samples):
            ctx = model.no_sync if i < len(batch_samples) - 1 else contextlib.nullcontext
            with ctx():
                loss = train_step(batch)
                loss.backward()
    """
    assert "TRG054" not in codes(body)
    assert "TRG054" in codes(body.replace("loss = train_step(batch)", "loss = losses[i]"))


def test_a_class_that_keeps_some_methods_to_the_main_process_runs_on_every_rank() -> None:
    # speechbrain's checkpoints.py before 2fb247f: a library module (no entry point, no process
    # group of its own) whose Checkpointer deletes under `@main_process_only` but makes each new
    # checkpoint directory in `save_checkpoint` on every process.
    body = """
        from speechbrain.utils.distributed import main_process_only

        class Checkpointer:
            def save_checkpoint(self, name):
                ckpt_dir = self.checkpoints_dir / name
                os.makedirs(ckpt_dir)  # May raise FileExistsError, let it.
                return ckpt_dir

            @staticmethod
            @main_process_only
            def _delete_checkpoint(checkpoint):
                shutil.rmtree(checkpoint.path)
    """
    assert "TRG023" in codes(body)
    # Without the gated sibling, nothing in the module says on which ranks the class runs.
    assert "TRG023" not in codes(body.replace("            @main_process_only\n", ""))


def test_a_step_after_gradients_all_reduced_by_hand_inside_no_sync_is_not_unsynchronised() -> None:
    # fairscale's tests/nn/data_parallel/test_fsdp_multiple_forward_checkpoint.py (found on the
    # repository snapshot once managers chosen beforehand were followed): inside `no_sync` the test
    # all-reduces every gradient itself before `optimizer.step()`.
    body = """
        import torch.distributed as dist
        no_sync_context = model.no_sync()
        with no_sync_context:
            for iteration in range(3):
                out = model(batch)
                loss = criterion(out, target)
                optimizer.zero_grad()
                loss.backward()
                for p in model.parameters():
                    dist.all_reduce(p.grad.data)
                    p.grad.data.div_(2.0)
                optimizer.step()
    """
    assert "TRG053" not in codes(body)
    assert "TRG053" in codes(body.replace("dist.all_reduce(p.grad.data)", "p.grad.data.mul_(1.0)"))


def test_speechbrains_if_main_process_is_a_main_process_test() -> None:
    # speechbrain/utils/train_logger.py: `if if_main_process(): self.writer = SummaryWriter(...)`.
    body = """
        from speechbrain.utils.distributed import if_main_process, main_process_only

        class TensorboardLogger:
            def __init__(self, save_dir):
                from torch.utils.tensorboard import SummaryWriter
                self.writer = None
                if if_main_process():
                    self.writer = SummaryWriter(save_dir)

            @main_process_only
            def log_stats(self, stats):
                self.writer.add_scalar("loss", stats)
    """
    assert "TRG023" not in codes(body)
    assert "TRG023" in codes(body.replace("if if_main_process():", "if True:"))
