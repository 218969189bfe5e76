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


DDP_HEAD = HEAD + "import torchvision\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"


def test_ddp_with_device_ids_on_a_model_never_moved_off_the_cpu_is_an_error() -> None:
    # pytorch/examples imagenet: built first, moved inside the branch that wraps it.
    moved = """
        def main(args):
            dist.init_process_group("nccl")
            model = torchvision.models.resnet18()
            if args.distributed:
                if args.gpu is not None:
                    torch.cuda.set_device(args.gpu)
                    model.cuda(args.gpu)
                    model = DDP(model, device_ids=[args.gpu])
            return model
        main(None)
    """
    assert "TRG004" not in codes(moved, DDP_HEAD)
    assert "TRG004" in codes(moved.replace("model.cuda(args.gpu)", "pass"), DDP_HEAD)
    assert "TRG004" not in codes(moved.replace("resnet18()", "resnet18().cuda()"), DDP_HEAD)
    # A trainer class that keeps the model on self.
    trainer = """
        class Net(torch.nn.Module):
            def forward(self, x):
                return x

        class Trainer:
            def __init__(self, gpu_id):
                dist.init_process_group("nccl")
                self.model = Net()
                self.model = DDP(self.model, device_ids=[gpu_id])
        Trainer(int(os.environ["LOCAL_RANK"]))
    """
    assert "TRG004" in codes(trainer, DDP_HEAD)
    assert "TRG004" not in codes(
        trainer.replace("self.model = Net()", "self.model = Net().to(gpu_id)"), DDP_HEAD
    )
    assert "TRG004" not in codes(trainer.replace("device_ids=[gpu_id]", "device_ids=None"), DDP_HEAD)


def test_a_sampler_together_with_shuffle_true_is_an_error_and_shuffle_when_no_sampler_is_not() -> None:
    body = """
        from torch.utils.data import DataLoader, DistributedSampler, BatchSampler, RandomSampler
        dist.init_process_group("nccl")
        ds = list(range(64))
        loader = DataLoader(ds, batch_size=8, sampler=DistributedSampler(ds), shuffle=True)
    """
    assert "TRG024" in codes(body)
    assert "TRG024" not in codes(body.replace("shuffle=True", "shuffle=False"))
    optional = body.replace(
        "sampler=DistributedSampler(ds), shuffle=True",
        "sampler=sampler, shuffle=True",
    ).replace(
        "ds = list(range(64))",
        "ds = list(range(64))\n        sampler = DistributedSampler(ds) if dist.is_initialized() else None",
    )
    # A sampler only in distributed runs still meets shuffle=True in exactly those runs
    # (ultralytics/yolov3#231); `shuffle=(sampler is None)` is the idiom.
    assert "TRG024" in codes(optional)
    assert "TRG024" not in codes(optional.replace("shuffle=True", "shuffle=(sampler is None)"))
    batches = body.replace(
        "batch_size=8, sampler=DistributedSampler(ds), shuffle=True",
        "batch_size=8, batch_sampler=BatchSampler(RandomSampler(ds), 8, False)",
    )
    assert "TRG024" in codes(batches)
    assert "TRG024" not in codes(batches.replace("batch_size=8, ", ""))


def test_rank_conditions_through_group_ranks_rank_lists_and_flags() -> None:
    # Megatron-LM: the save is gated on the data-parallel group's rank, or on a flag set under it.
    group = """
        dist.init_process_group("nccl")
        class Optimizer:
            def save_parameter_state(self, filename):
                state_dict = self.get_parameter_state()
                if self.data_parallel_group.rank() == 0:
                    torch.save(state_dict, filename)
        Optimizer().save_parameter_state("p.pt")
    """
    assert "TRG023" not in codes(group)
    assert "TRG023" in codes(group.replace("if self.data_parallel_group.rank() == 0:", "if True:"))
    flag = """
        dist.init_process_group("nccl")
        def save(states, filename):
            save_states = False
            if dist.get_rank() == 0:
                save_states = True
            if save_states:
                torch.save(states, filename)
        save({}, "x.pt")
    """
    assert "TRG023" not in codes(flag)
    assert "TRG023" in codes(flag.replace("save_states = False", "save_states = True"))
    listed = """
        dist.init_process_group("nccl")
        ranks_to_break = [6, 3, 4]
        if dist.get_rank() in ranks_to_break:
            os.makedirs("ckpt")
    """
    assert "TRG023" not in codes(listed)


def test_members_of_a_subgroup_and_both_arms_of_one_rank_test_reach_the_collective() -> None:
    members = """
        dist.init_process_group("nccl")
        ranks = [0, 1]
        group = dist.new_group(ranks)
        t = torch.ones(1)
        if dist.get_rank() in ranks:
            dist.all_reduce(t, group=group)
    """
    assert [c for c in codes(members) if c in ("TRG021", "TRG036")] == []
    assert "TRG021" in codes(members.replace(", group=group", ""))
    # Megatron-LM test_replication: the ranks outside wait and leave, the others wait at the end.
    arms = """
        dist.init_process_group("nccl")
        def check(test_ranks):
            rank = dist.get_rank()
            if rank not in test_ranks:
                dist.barrier()
                return
            dist.all_gather_object([None] * len(test_ranks), rank)
            dist.barrier()
        check([0, 3])
    """
    found = codes(arms)
    assert found.count("TRG021") == 1  # the all_gather only the listed ranks reach


def test_a_loader_handed_to_a_runner_from_another_module_gets_its_epoch_set_there() -> None:
    body = """
        from torch.utils.data import DataLoader, DistributedSampler
        from ignite.engine import create_supervised_trainer
        dist.init_process_group("nccl")
        ds = list(range(64))
        sampler = DistributedSampler(ds)
        loader = DataLoader(ds, batch_size=8, sampler=sampler)
        trainer = create_supervised_trainer(None, None, None)
        trainer.run(loader, max_epochs=10)
    """
    assert "TRG022" not in codes(body)
    own_loop = body.replace(
        "trainer.run(loader, max_epochs=10)",
        "for epoch in range(10):\n            for batch in loader:\n                pass",
    )
    assert "TRG022" in codes(own_loop)


def test_a_model_class_from_the_project_or_torchvision_by_name_is_built_on_the_cpu() -> None:
    body = """
        from models.yolo import Model
        def main(args):
            dist.init_process_group("nccl")
            torch.cuda.set_device(args.gpu)
            model = torchvision.models.__dict__[args.arch]()
            model = DDP(model, device_ids=[args.gpu])
            detector = Model(args.cfg)
            detector = DDP(detector, device_ids=[args.gpu])
        main(None)
    """
    assert codes(body, DDP_HEAD).count("TRG004") == 2
    placed = body.replace("Model(args.cfg)", "Model(args.cfg, args.gpu)").replace(
        "torchvision.models.__dict__[args.arch]()", "torchvision.models.__dict__[args.arch]().cuda()"
    )
    assert "TRG004" not in codes(placed, DDP_HEAD)


def test_a_rank_test_inside_a_conditional_expression_is_a_gate() -> None:
    body = """
        dist.init_process_group("nccl")
        leader = dist.get_rank() == 0 if dist.is_initialized() else True
        if leader:
            dist.barrier()
    """
    assert "TRG021" in codes(body)
    assert "TRG021" not in codes(body.replace("dist.get_rank() == 0 if", "True if"))


def test_a_function_decorated_master_only_runs_on_rank_0() -> None:
    body = """
        from basicsr.utils.dist_util import master_only
        dist.init_process_group("nccl")

        @master_only
        def save_network(net, path):
            torch.save(net.state_dict(), path)

        for it in range(3):
            save_network(torch.nn.Linear(2, 2), "net.pth")
    """
    assert "TRG023" not in codes(body)
    assert "TRG023" in codes(body.replace("        @master_only\n", ""))


def test_an_hf_trainer_script_ending_in_save_pretrained_is_not_a_race_worth_a_warning() -> None:
    body = """
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
        model = AutoModelForCausalLM.from_pretrained("gpt2")
        trainer = Trainer(model=model, args=TrainingArguments(output_dir="out"), train_dataset=None)
        trainer.train()
        model.save_pretrained("out/final")
        torch.save(model.state_dict(), "out/final.pt")
    """
    assert codes(body).count("TRG023") == 1  # the torch.save only
    # With a wrapper of its own (DDP here), the script does the distribution and is judged as such.
    wrapped = body.replace(
        "trainer.train()", "trainer.train()\n        model = torch.nn.parallel.DistributedDataParallel(model)"
    )
    assert codes(wrapped).count("TRG023") == 2


def test_an_imported_get_dist_info_is_mmcvs_rank_first_only_when_it_looks_like_it() -> None:
    body = """
        from nanochat.common import get_dist_info
        dist.init_process_group("nccl")
        ddp, ddp_rank, ddp_local_rank, ddp_world_size = get_dist_info()
        if ddp:
            dist.all_reduce(torch.ones(1))
    """
    assert "TRG021" not in codes(body)
    mmcv = body.replace("ddp, ddp_rank, ddp_local_rank, ddp_world_size =", "rank, world_size =").replace(
        "if ddp:", "if rank:"
    )
    assert "TRG021" in codes(mmcv)


def test_a_snippet_pasted_without_its_imports_is_read_with_the_conventional_ones() -> None:
    snippet = """
        def train(model, loader, optimizer, epochs):
            sampler = DistributedSampler(loader.dataset)
            loader = DataLoader(loader.dataset, batch_size=32, sampler=sampler, shuffle=True)
            for epoch in range(epochs):
                for batch in loader:
                    model(batch).backward()
                if dist.get_rank() == 0:
                    torch.save(model.state_dict(), "ckpt.pt")
                    dist.barrier()
    """
    found = codes(snippet, head="")
    assert {"TRG021", "TRG022", "TRG024"} <= set(found)
    # A file that binds the name itself means something else by it.
    own = "def dist(x):\n    return x\n" + textwrap.dedent(snippet)
    assert "TRG021" not in codes(own, head="")


def test_find_unused_parameters_with_the_reentrant_checkpoint_fails_the_backward() -> None:
    body = """
        from accelerate import Accelerator, DistributedDataParallelKwargs
        from transformers import TrainingArguments
        accelerator = Accelerator(kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=True)])
        model = None
        model.gradient_checkpointing_enable()
        model = accelerator.prepare(model)
    """
    found = codes(body)
    assert "TRG007" in found and "TRG008" not in found  # the stronger finding only
    fixed = body.replace(
        "gradient_checkpointing_enable()",
        "gradient_checkpointing_enable(gradient_checkpointing_kwargs={'use_reentrant': False})",
    )
    assert "TRG007" not in codes(fixed) and "TRG008" in codes(fixed)
    trainer = """
        from transformers import Trainer, TrainingArguments
        args = TrainingArguments(output_dir="o", gradient_checkpointing=True, ddp_find_unused_parameters=True)
        Trainer(model=None, args=args).train()
    """
    assert "TRG007" in codes(trainer)
    assert "TRG007" not in codes(
        trainer.replace("ddp_find_unused_parameters=True", "ddp_find_unused_parameters=False")
    )
    manual = """
        from torch.utils.checkpoint import checkpoint
        from torch.nn.parallel import DistributedDataParallel as DDP
        def forward(layers, x):
            for layer in layers:
                x = checkpoint(layer, x)
            return x
        model = DDP(None, find_unused_parameters=True)
    """
    assert "TRG007" in codes(manual)
    assert "TRG007" not in codes(
        manual.replace("checkpoint(layer, x)", "checkpoint(layer, x, use_reentrant=False)")
    )
    assert "TRG007" not in codes(
        manual.replace("find_unused_parameters=True", "find_unused_parameters=True, static_graph=True")
    )


def test_a_loader_accelerate_prepares_sets_its_own_epoch() -> None:
    body = """
        from accelerate import Accelerator
        from torch.utils.data import DataLoader, DistributedSampler
        accelerator = Accelerator()
        ds = list(range(64))
        loader = DataLoader(ds, batch_size=8, sampler=DistributedSampler(ds))
        loader = accelerator.prepare(loader)
        for epoch in range(3):
            for batch in loader:
                pass
    """
    assert "TRG022" not in codes(body)
    assert "TRG022" in codes(body.replace("        loader = accelerator.prepare(loader)\n", ""))
