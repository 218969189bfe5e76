"""The lint on shapes of real code found beyond eval/lint (ConvNeXt, Swin, YOLOv5, GPT-NeoX,
lightning-bolts, LLMs-from-scratch): each mechanism on a small script modelled on one, with the
variant that must still be reported."""

from __future__ import annotations

import textwrap

from triage.core.lint import lint_source

HEAD = "import os\nimport torch\nimport torch.distributed as dist\n"


def codes(body: str, head: str = HEAD) -> list[str]:
    return [f.code for f in lint_source(head + textwrap.dedent(body), "train.py")]


def test_a_rank_read_from_local_rank_first_is_not_called_the_global_rank() -> None:
    body = """
        def main(rank, world_size):
            dist.init_process_group("nccl", rank=rank, world_size=world_size)
            torch.cuda.set_device(rank)
        if __name__ == "__main__":
            if "LOCAL_RANK" in os.environ:
                rank = int(os.environ["LOCAL_RANK"])
            elif "RANK" in os.environ:
                rank = int(os.environ["RANK"])
            else:
                rank = 0
            main(rank, int(os.environ["WORLD_SIZE"]))
    """
    assert "TRG003" not in codes(body)
    only_global = body.replace('rank = int(os.environ["LOCAL_RANK"])', 'rank = int(os.environ["RANK"])')
    assert "TRG003" in codes(only_global)


def test_a_utils_module_says_nothing_about_a_class_its_set_up_never_reaches() -> None:
    utils = textwrap.dedent(
        """
        from torch.utils.tensorboard import SummaryWriter

        def init_distributed_mode(args):
            args.rank = int(os.environ["RANK"])
            dist.init_process_group("nccl")

        class TensorboardLogger:
            def __init__(self, log_dir):
                self.writer = SummaryWriter(log_dir=log_dir)
        """
    )
    assert "TRG023" not in codes(utils)
    # A function of the same module that reads the rank says it runs on every rank.
    train = """
        def train(model, loader, rank):
            for epoch in range(3):
                if rank == 0:
                    print(epoch)
                torch.save(model.state_dict(), "model.pt")
    """
    assert "TRG023" in codes(utils + textwrap.dedent(train))
    # So does one the set-up function calls, or one that calls it.
    assert "TRG023" in codes(utils.replace('"nccl")', '"nccl")\n    TensorboardLogger("runs")'))


def test_a_loader_built_for_another_module_is_left_to_that_module_to_set_the_epoch() -> None:
    build = """
        from torch.utils.data import DataLoader, DistributedSampler

        for tag in ("a", "b"):
            if tag == "b":
                break

        def build_loader(dataset, batch_size):
            sampler = DistributedSampler(dataset, num_replicas=dist.get_world_size(), rank=dist.get_rank())
            return DataLoader(dataset, batch_size=batch_size, sampler=sampler)
    """
    assert "TRG022" not in codes(build)
    # The same builder used by this file's own loop, which never sets the epoch.
    run = "\nloader = build_loader(range(8), 2)\nfor epoch in range(3):\n    for batch in loader:\n        pass\n"
    assert "TRG022" in codes(textwrap.dedent(build) + run)


def test_a_path_made_per_rank_in_another_method_is_per_rank() -> None:
    module = """
        import pytorch_lightning as pl

        class SwAV(pl.LightningModule):
            def setup(self, stage):
                self.queue_path = os.path.join("queues", "queue" + str(self.trainer.global_rank) + ".pth")

            def on_train_epoch_end(self):
                torch.save({"queue": self.queue}, self.queue_path)

        pl.Trainer(devices=4, strategy="ddp").fit(SwAV())
    """
    assert "TRG023" not in codes(module)
    assert "TRG023" in codes(
        module.replace('"queue" + str(self.trainer.global_rank) + ".pth"', '"queue.pth"')
    )


def test_a_helper_collective_under_a_condition_the_call_site_ruled_out_is_not_run_there() -> None:
    body = """
        dist.init_process_group("nccl")

        class NoiseScale:
            def __init__(self, args):
                self.args = args

            def _update(self, grad):
                if self.args.is_pipe_parallel:
                    dist.all_reduce(grad)
                return grad

            def update(self, grad):
                if self.args.is_pipe_parallel:
                    self._update(grad)
                else:
                    if dist.get_rank() == 0:
                        self._update(grad)
                    dist.barrier()

        NoiseScale(None).update(torch.ones(1))
    """
    assert "TRG021" not in codes(body)
    assert "TRG021" in codes(
        body.replace(
            "if self.args.is_pipe_parallel:\n                    dist", "if True:\n                    dist"
        )
    )
