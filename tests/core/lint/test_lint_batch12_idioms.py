"""The mechanisms session 12's train evidence needed (eval/lint/README.md, "Session 12"), quoting the
real code of train-split files: the finding appears for the real idiom and goes away for its fix or a
near miss."""

from __future__ import annotations

import textwrap

from triage.core.lint import lint_source


def codes(body: str) -> list[str]:
    return [f.code for f in lint_source(textwrap.dedent(body), "module.py")]


# EIFY/mup-vit before a38a73a: every process of mp.spawn "selects" its GPU with a bare
# `torch.cuda.device(args.gpu)`, which only builds a context manager.
SPAWNED = """
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp

    def main_worker(gpu, args):
        args.gpu = gpu
        dist.init_process_group(backend="nccl", init_method=args.dist_url, world_size=2, rank=gpu)
        model = build(args)
        torch.cuda.device(args.gpu)
        model.cuda(args.gpu)
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[args.gpu])
        train(model)

    if __name__ == "__main__":
        mp.spawn(main_worker, nprocs=2, args=(parse(),))
"""


def test_a_bare_cuda_device_call_selects_nothing() -> None:
    assert codes(SPAWNED) == ["TRG030"]
    # the fix: bind the device
    bound = SPAWNED.replace("torch.cuda.device(args.gpu)", "torch.cuda.set_device(args.gpu)")
    assert codes(bound) == []
    # near miss: the same call used as a context manager does select the device
    entered = SPAWNED.replace(
        "        torch.cuda.device(args.gpu)\n        model.cuda(args.gpu)\n",
        "        with torch.cuda.device(args.gpu):\n            model.cuda(args.gpu)\n",
    )
    assert codes(entered) == []


# neuralmagic/sparseml before b0fc815 (#29): the validation set is made on the main process only,
# and inside `torch_distributed_zero_first`, whose barriers the other ranks never reach.
VALIDATION = """
    import torch
    from sparseml.pytorch.utils import torch_distributed_zero_first

    def _create_val_dataset_and_loader(args, image_size):
        if args.command == "lr_sensitivity" or not (args.is_main_process and args.dataset != "imagefolder"):
            return None, None
        with torch_distributed_zero_first(args.local_rank):
            val_dataset = DatasetRegistry.create(args.dataset, root=args.dataset_path, train=False)
        return val_dataset, None

    def main(args):
        torch.distributed.init_process_group(backend="nccl")
        args.is_main_process = args.rank in [-1, 0]
        with torch_distributed_zero_first(args.local_rank):
            train_dataset = DatasetRegistry.create(args.dataset, root=args.dataset_path, train=True)
        val_dataset, val_loader = _create_val_dataset_and_loader(args, 224)
"""


def test_a_rank_0_first_context_past_a_main_only_return_is_a_rank_conditional_collective() -> None:
    assert codes(VALIDATION) == ["TRG021"]
    # the fix: the dataset made without the barrier on the main process
    fixed = VALIDATION.replace(
        "        with torch_distributed_zero_first(args.local_rank):\n            val_dataset",
        "        if True:\n            val_dataset",
    )
    assert codes(fixed) == []
    # near miss: the return does not depend on the process, so every rank reaches the barrier
    every_rank = VALIDATION.replace(' or not (args.is_main_process and args.dataset != "imagefolder")', "")
    assert codes(every_rank) == []


# jiaweizzhao/GaLore's torchrun_main.py: C4 streamed and split by node, read up to a step budget for
# training; the validation stream, split too, read by a gradient-free pass whose length differs.
STREAMED = """
    import datasets
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    @torch.no_grad()
    def evaluate_model(model, rank, world_size):
        val_data = datasets.load_dataset("c4", "en", split="validation", streaming=True)
        val_data = val_data.shuffle(seed=42)
        val_data = datasets.distributed.split_dataset_by_node(val_data, rank=rank, world_size=world_size)
        tokens = 0
        for batch in val_data:
            if tokens > 10_000_000:
                break
            tokens += model(**batch).loss.numel() * world_size
        return tokens

    def main(args):
        dist.init_process_group(backend="nccl")
        rank, world_size = dist.get_rank(), dist.get_world_size()
        data = datasets.load_dataset("allenai/c4", "en", split="train", streaming=True)
        data: datasets.Dataset = data.shuffle(seed=42)
        data = datasets.distributed.split_dataset_by_node(data, rank=rank, world_size=world_size)
        model = DDP(build(args))
        update_step = 0
        for batch in data:
            update_step += 1
            if update_step > args.num_training_steps:
                break
            model(**batch).loss.backward()
        evaluate_model(model, rank, world_size)
"""


def test_a_stream_read_to_a_step_budget_and_a_gradient_free_pass_are_not_uneven_data() -> None:
    assert "TRG009" not in codes(STREAMED)
    # without the step budget, the training stream is read to its end: uneven shards hang the last step
    unbounded = STREAMED.replace(
        "            if update_step > args.num_training_steps:\n                break\n", ""
    )
    assert codes(unbounded).count("TRG009") == 1
    # a dataset in memory, not a stream: its split can be uneven whatever the budget
    in_memory = STREAMED.replace('split="train", streaming=True)', 'split="train")')
    assert codes(in_memory).count("TRG009") == 1
    # an FSDP model's forward gathers parameters, so an uneven evaluation pass hangs too
    sharded = STREAMED.replace(
        "from torch.nn.parallel import DistributedDataParallel as DDP",
        "from torch.distributed.fsdp import FullyShardedDataParallel as DDP",
    )
    assert codes(sharded).count("TRG009") == 1
