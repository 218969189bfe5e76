"""Mechanisms that session 8's unseen scripts needed (eval/lint/README.md, "Session 8"), each on its
own, quoting the real code of a train-split file. Each test shows the finding appear or go away for
the real idiom and the opposite for the code next to it."""

from __future__ import annotations

import textwrap

from tests.core.lint import test_lint_unseen_idioms as unseen

HEAD = "import os\nimport sys\nimport subprocess\nimport torch\nimport torch.distributed as dist\n"


def codes(body: str) -> list[str]:
    return unseen.codes(body, HEAD)


def test_a_rank_spelled_in_capitals_gates_like_the_lower_case_name() -> None:
    # open-mmlab/OpenPCDet tools/train.py: the local rank comes back from its own launcher helper
    # into a config field, `total_gpus, cfg.LOCAL_RANK = common_utils.init_dist_pytorch(...)`.
    body = """
        from torch.utils.tensorboard import SummaryWriter
        from pcdet.utils import common_utils
        def main(cfg, args):
            total_gpus, cfg.LOCAL_RANK = common_utils.init_dist_pytorch(args.tcp_port, args.local_rank)
            dist.init_process_group("nccl")
            tb_log = SummaryWriter(log_dir="tensorboard") if cfg.LOCAL_RANK == 0 else None
        if __name__ == "__main__":
            main(None, None)
    """
    assert "TRG023" not in codes(body)
    assert "TRG023" in codes(body.replace("if cfg.LOCAL_RANK == 0 else None", "if cfg.VERBOSE else None"))


def test_a_function_that_starts_the_workers_as_subprocesses_runs_once() -> None:
    # NVIDIA/waveglow distributed.py: main() makes the log folder, then starts one
    # `python train.py --rank=i` per GPU; the same file's gradient hook runs in the workers.
    body = """
        def apply_gradient_allreduce(module):
            for param in module.parameters():
                dist.all_reduce(param.grad.data)
            return module

        def main(config, stdout_dir, args_str):
            args_list = ["train.py"] + args_str.split(" ")
            if not os.path.isdir(stdout_dir):
                os.makedirs(stdout_dir)
            workers = []
            for i in range(torch.cuda.device_count()):
                args_list[-1] = "--rank={}".format(i)
                p = subprocess.Popen([str(sys.executable)] + args_list)
                workers.append(p)
            for p in workers:
                p.wait()

        if __name__ == "__main__":
            main("config.json", "logs", "")
    """
    assert "TRG023" not in codes(body)
    # Without the launch, main() is per-rank code and the unguarded makedirs races.
    without = body.replace("p = subprocess.Popen([str(sys.executable)] + args_list)", "p = run_here(i)")
    assert "TRG023" in codes(without)


def test_a_model_wrapped_on_the_cpu_and_moved_after_the_wrap_is_reported() -> None:
    # narumiruna/pytorch-distributed-example before d34d9d9 ("Fix GPU DistributedDataParallel"):
    # `net = Net()`, `net = DistributedDataParallel(net)`, then `net.to(device)`.
    body = """
        import torch.nn as nn
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(784, 10)
        def run(args):
            dist.init_process_group(backend=args.backend)
            device = torch.device("cuda")
            net = Net()
            net = nn.parallel.DistributedDataParallel(net)
            net.to(device)
        run(None)
    """
    assert "TRG004" in codes(body)
    fixed = body.replace("net = Net()\n", "net = Net().to(device)\n").replace("net.to(device)", "pass")
    assert "TRG004" not in codes(fixed)
    # A DDP model on the CPU that stays there (gloo) is a choice, not a bug.
    assert "TRG004" not in codes(body.replace("net.to(device)", "pass"))


def test_a_prepared_model_is_followed_into_the_functions_it_is_passed_to() -> None:
    # nnaisense/bayesian-flow-networks train.py (#6): main() prepares the model, train(cfg, acc,
    # model, ...) validates under `is_main` with `validate(model=model, ema_model=ema_model, ...)`,
    # where `model_to_eval = ema_model if ema_model is not None else model` runs the DDP forward.
    body = """
        from accelerate import Accelerator
        def validate(model, ema_model, val_dataloader, accelerator):
            model_to_eval = ema_model if ema_model is not None else model
            for eval_batch in val_dataloader:
                loss = model_to_eval(eval_batch.to(accelerator.device)).item()
            return loss

        def train(accelerator, model, ema_model, dataloaders, optimizer):
            is_main = accelerator.is_main_process
            for step in range(1000):
                loss = model(next(dataloaders["train"]))
                accelerator.backward(loss)
                optimizer.step()
                if is_main and step % 100 == 0:
                    validate(model=model, ema_model=ema_model, val_dataloader=dataloaders["val"],
                             accelerator=accelerator)

        def main():
            acc = Accelerator()
            model, optimizer, dataloaders = setup()
            ema = None
            model, optimizer, dataloaders["train"] = acc.prepare(model, optimizer, dataloaders["train"])
            train(acc, model, ema, dataloaders, optimizer)

        if __name__ == "__main__":
            main()
    """
    assert "TRG036" in codes(body)
    # The author's intended path, the EMA copy (a plain module), communicates with no one.
    assert "TRG036" not in codes(body.replace("ema_model if ema_model is not None else model", "ema_model"))
    # A parameter two callers fill with different things is not taken for either.
    twice = body.replace(
        "train(acc, model, ema, dataloaders, optimizer)",
        "train(acc, model, ema, dataloaders, optimizer)\n            train(acc, setup()[0], ema, dataloaders, optimizer)",
    )
    assert "TRG036" not in codes(twice)


SIMSIAM = """
    def main(args):
        train_set = get_dataset(args.dataset, args.data_dir, train=True)
        train_loader = torch.utils.data.DataLoader(
            dataset=train_set, batch_size=args.batch_size, shuffle=True, drop_last=True
        )
        model = get_model(args.model).to(args.device)
        if args.local_rank >= 0:
            torch.cuda.set_device(args.local_rank)
            torch.distributed.init_process_group(backend="nccl", init_method="env://")
            model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[args.local_rank])
        for epoch in range(args.num_epochs):
            for images, labels in train_loader:
                model(images).mean().backward()
    if __name__ == "__main__":
        main(get_args())
"""


def test_a_shuffling_loader_with_no_distributed_sampler_under_ddp_is_reported() -> None:
    # PatrickHua/SimSiam main.py before 3c17c32 (and #16): torch.distributed.launch + DDP, and the
    # train loader is `DataLoader(dataset=train_set, ..., shuffle=True)`: each rank runs all the data.
    assert "TRG025" in codes(SIMSIAM)
    sampled = SIMSIAM.replace(
        "shuffle=True, drop_last=True",
        "sampler=torch.utils.data.distributed.DistributedSampler(train_set), drop_last=True",
    )
    assert "TRG025" not in codes(sampled)
    # A dataset split by rank before the loader (nanoVLM: `train_ds.shard(num_shards=world_size,
    # index=rank)`) already gives each rank its part.
    sharded = SIMSIAM.replace(
        "train=True)", "train=True)\n        train_set = train_set.shard(num_shards=world, index=args.rank)"
    )
    assert "TRG025" not in codes(sharded)
    # So does a dataset builder of the same file that shards by rank.
    built = SIMSIAM.replace(
        "def main(args):",
        "def get_dataset(name, root, train):\n        return Images(root, part=dist.get_rank(), parts=dist.get_world_size())\n    def main(args):",
    )
    assert "TRG025" not in codes(built)
    # An evaluation loader on every rank is duplicated work, not a training bug.
    assert "TRG025" not in codes(SIMSIAM.replace("train_set", "val_set"))
    # Accelerate shards the loaders it prepares.
    accelerated = "from accelerate import Accelerator\n" + textwrap.dedent(SIMSIAM).replace(
        "model = get_model(args.model).to(args.device)",
        "model = get_model(args.model).to(args.device)\n    model, train_loader = Accelerator().prepare(model, train_loader)",
    )
    assert "TRG025" not in codes(accelerated)
