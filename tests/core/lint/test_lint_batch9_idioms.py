"""Mechanisms that session 9's unseen scripts needed (eval/lint/README.md, "Session 9"), each on its
own, quoting the real code of a train-split file. Each test shows the finding appear or go away for
the real idiom and the opposite for the code next to it."""

from __future__ import annotations

from tests.core.lint import test_lint_unseen_idioms as unseen

HEAD = "import io\nimport os\nimport torch\nimport torch.distributed as dist\n"


def codes(body: str) -> list[str]:
    return unseen.codes(body, HEAD)


def test_a_set_epoch_that_runs_once_before_the_epochs_sets_no_epoch() -> None:
    # pytorch-ignite/code-generator before 0c19ad2: `run` is Ignite's job (`parallel.run(run,
    # config)`), and its set_epoch ran once at set-up; the fix moved it into an epoch handler.
    body = """
        import ignite.distributed as idist
        from ignite.engine import Events
        from torch.utils.data.distributed import DistributedSampler

        def run(local_rank, config):
            dataloader_train = idist.auto_dataloader(config.dataset, shuffle=True)
            trainer = create_trainer(config)
            if idist.get_world_size() > 1 and isinstance(dataloader_train.sampler, DistributedSampler):
                dataloader_train.sampler.set_epoch(trainer.state.epoch - 1)
            trainer.run(dataloader_train, max_epochs=config.max_epochs)

        def main():
            config = parse()
            with idist.Parallel(config.backend) as parallel:
                parallel.run(run, config)

        if __name__ == "__main__":
            main()
    """
    assert "TRG022" in codes(body)
    handler = body.replace(
        "            if idist.get_world_size() > 1 and",
        "            @trainer.on(Events.EPOCH_STARTED)\n            def set_epoch():\n"
        "                dataloader_train.sampler.set_epoch(trainer.state.epoch - 1)\n            if False and",
    )
    assert "TRG022" not in codes(handler)
    # huggingface/transfer-learning-conv-ai: the handler is a lambda.
    lambda_handler = body.replace(
        "                dataloader_train.sampler.set_epoch(trainer.state.epoch - 1)",
        "                trainer.add_event_handler(Events.EPOCH_STARTED, lambda e: dataloader_train.sampler"
        ".set_epoch(e.state.epoch))",
    )
    assert "TRG022" not in codes(lambda_handler)
    # huggingface/accelerate test_utils/scripts/test_script.py: a prepared loader's own set_epoch(0)
    # (a wrapper that sets the epoch itself each time it is iterated) resets it on purpose.
    prepared = """
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        def check_seedable_sampler(train_set):
            accelerator = Accelerator()
            train_dl = accelerator.prepare(DataLoader(train_set, batch_size=2, shuffle=True))
            train_dl.set_epoch(0)
            for _ in range(3):
                for batch in train_dl:
                    pass
        check_seedable_sampler(None)
    """
    assert "TRG022" not in codes(prepared)


def test_shuffle_passed_through_a_dict_of_keyword_arguments_clashes_with_the_sampler() -> None:
    # kubernetes-sigs/jobset's mnist before c8b7b74 (pytorch/examples' mnist with DDP added).
    body = """
        from torch.utils.data.distributed import DistributedSampler
        def main(args, train_set):
            dist.init_process_group("nccl")
            train_kwargs = {'batch_size': args.batch_size}
            if torch.cuda.is_available():
                cuda_kwargs = {'num_workers': 1, 'pin_memory': True, 'shuffle': True}
                train_kwargs.update(cuda_kwargs)
            train_sampler = DistributedSampler(dataset=train_set)
            train_loader = torch.utils.data.DataLoader(train_set, **train_kwargs, sampler=train_sampler)
            for epoch in range(3):
                train_sampler.set_epoch(epoch)
        main(None, None)
    """
    assert "TRG024" in codes(body)
    assert "TRG024" not in codes(body.replace(", 'shuffle': True", ""))
    assert "TRG024" in codes(
        body.replace("train_kwargs.update(cuda_kwargs)", "train_kwargs['shuffle'] = True")
    )


def test_a_device_a_helper_returns_or_a_device_map_takes_is_checked_for_the_global_rank() -> None:
    # huggingface/trl before #515: `_get_current_device()` returned the Accelerator's global
    # process index, and the value head was moved there.
    body = """
        from accelerate import Accelerator
        import torch.nn as nn
        class ValueHead(nn.Module):
            @classmethod
            def _get_current_device(cls):
                dummy_accelerator = Accelerator()
                current_device = dummy_accelerator.process_index
                return current_device if torch.cuda.is_available() else "cpu"
            def post_init(self, hidden_dim):
                self.score = nn.Linear(hidden_dim, 1).to(self._get_current_device())
        dist.init_process_group("nccl")
        ValueHead().post_init(8)
    """
    assert "TRG003" in codes(body)
    assert "TRG003" not in codes(body.replace(".process_index", ".local_process_index"))
    device_map = """
        from accelerate import PartialState
        from transformers import AutoModelForCausalLM
        dist.init_process_group("nccl")
        model = AutoModelForCausalLM.from_pretrained("m", device_map={"": PartialState().process_index})
    """
    assert "TRG003" in codes(device_map)
    assert "TRG003" not in codes(device_map.replace(".process_index", ".local_process_index"))


def test_a_distributed_rank_attribute_gates_the_saves_after_an_early_return() -> None:
    # facebookresearch/sam2 training/trainer.py: `if self.distributed_rank != 0: return` before the
    # loop that calls `_save_checkpoint`, whose torch.save is then rank 0's.
    body = """
        from training.utils.distributed import get_machine_local_and_dist_rank
        class Trainer:
            def __init__(self):
                dist.init_process_group("nccl")
                self.local_rank, self.distributed_rank = get_machine_local_and_dist_rank()
            def save_checkpoint(self, checkpoint, checkpoint_paths):
                if self.distributed_rank != 0:
                    return
                for checkpoint_path in checkpoint_paths:
                    self._save_checkpoint(checkpoint, checkpoint_path)
            def _save_checkpoint(self, checkpoint, checkpoint_path):
                torch.save(checkpoint, checkpoint_path + ".tmp")
        Trainer().save_checkpoint({}, ["a.pt"])
    """
    assert "TRG023" not in codes(body)
    assert "TRG023" in codes(
        body.replace("                if self.distributed_rank != 0:\n                    return\n", "")
    )


def test_a_save_into_a_buffer_or_to_a_file_a_caller_elsewhere_chooses_is_not_judged() -> None:
    # pytorch/elastic examples/imagenet/main.py: the snapshot is pickled into a BytesIO to be
    # broadcast, and `State.save(self, f)` is an API nothing in the file calls.
    body = """
        class State:
            def capture_snapshot(self):
                return {}
            def save(self, f):
                torch.save(self.capture_snapshot(), f)
        def load_checkpoint(state):
            with io.BytesIO() as f:
                torch.save(state.capture_snapshot(), f)
                raw = f.getvalue()
            return raw
        dist.init_process_group("nccl")
        load_checkpoint(State())
    """
    assert "TRG023" not in codes(body)
    assert "TRG023" in codes(body.rstrip() + "\n        State().save('checkpoint.pt')\n")
    assert "TRG023" in codes(body.replace("with io.BytesIO() as f:", "with open('snap.pt', 'wb') as f:"))


def test_a_log_directory_named_for_the_replica_is_one_per_process() -> None:
    # pytorch/torchft train_diloco.py: every process is its own replica group.
    body = """
        from torch.utils.tensorboard import SummaryWriter
        def main():
            REPLICA_GROUP_ID = int(os.environ.get("REPLICA_GROUP_ID", 0))
            output_folder = f"output/replica-{REPLICA_GROUP_ID}"
            writer = SummaryWriter(f"{output_folder}/tensorboard", max_queue=1000)
            dist.init_process_group("nccl")
        main()
    """
    assert "TRG023" not in codes(body)
    assert "TRG023" in codes(body.replace("replica-{REPLICA_GROUP_ID}", "run"))
    # A directory several names away from a model moved to the local rank is not per rank
    # (modelscope/FunASR funasr/bin/train.py).
    far = """
        from torch.utils.tensorboard import SummaryWriter
        def main(model, kwargs):
            local_rank = int(os.environ["LOCAL_RANK"])
            dist.init_process_group("nccl")
            model = model.cuda(local_rank)
            kwargs = model.kwargs
            tensorboard_dir = os.path.join(kwargs.get("output_dir"), "tensorboard")
            writer = SummaryWriter(tensorboard_dir)
        main(None, {})
    """
    assert "TRG023" in codes(far)


def test_a_loader_method_of_a_strategy_nothing_here_calls_is_built_for_the_trainer() -> None:
    # OpenRLHF openrlhf/utils/deepspeed/deepspeed.py: the strategy sets up the process group and
    # builds the loader the trainer module iterates (and calls set_epoch on).
    body = """
        import deepspeed
        from torch.utils.data import DataLoader, DistributedSampler
        class DeepspeedStrategy:
            def setup_distributed(self):
                deepspeed.init_distributed()
            def prepare(self, model):
                return self._ds_init_train_model(model)
            def _ds_init_train_model(self, model):
                engine, *_ = deepspeed.initialize(model=model)
                return engine
            def setup_dataloader(self, replay_buffer, batch_size, shuffle=True):
                sampler = DistributedSampler(replay_buffer, shuffle=shuffle)
                return DataLoader(replay_buffer, batch_size=batch_size, sampler=sampler)
    """
    assert "TRG022" not in codes(body)
    called = (
        body.rstrip()
        + "\n"
        + (
            "            def fit(self, data):\n"
            "                self.prepare(None)\n"
            "                loader = self.setup_dataloader(data, 8)\n"
            "                for epoch in range(3):\n"
            "                    for batch in loader:\n"
            "                        pass\n"
        )
    )
    assert "TRG022" in codes(called)
