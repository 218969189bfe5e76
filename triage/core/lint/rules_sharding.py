"""D22: a training loader that does not split the data between the ranks.

TRG025: in a script that wraps its model in DDP or FSDP itself, a DataLoader that shuffles
        (`shuffle=True`, or a plain `RandomSampler`/`WeightedRandomSampler`) with no
        DistributedSampler, over a dataset nothing shards by rank: every rank trains on the whole
        dataset.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from triage.core.lint.context import Context
from triage.core.lint.model import Finding, Rule
from triage.core.lint.patterns import kwarg_true
from triage.core.lint.reach import anchored, for_evaluation
from triage.core.lint.rules_data import run_arguments
from triage.core.lint.script import Call, dotted

TRG025 = Rule(
    code="TRG025",
    entry="D22",
    severity="warning",
    name="loader-without-distributed-sampler",
    message="the training DataLoader has no DistributedSampler: every rank trains on the whole dataset",
    fix="pass `sampler=DistributedSampler(dataset)` (and drop shuffle=True), then call `sampler.set_epoch(epoch)` each epoch",
    finds=(
        "In a script that wraps its own model in `DistributedDataParallel` or FSDP (not Accelerate,"
        " Lightning or the HF Trainer, which shard the loaders they are given), a `DataLoader` with"
        " `shuffle=True` or a non-distributed random sampler (`RandomSampler`, `WeightedRandomSampler`,"
        " `SubsetRandomSampler`), no `sampler`/`batch_sampler` that is distributed, over a dataset whose"
        " construction mentions no rank, world size or shard. Loaders built for evaluation, and loaders"
        " handed to a runner from another module, are left alone."
    ),
    why=(
        "DDP averages the gradients of N processes, each expected to see a different 1/N of the data."
        " A plain shuffling loader gives every process the whole dataset: an epoch costs N times the"
        " work, and with the same seed on every rank (the usual `torch.manual_seed(args.seed)`) the"
        " ranks draw the same batches, so N GPUs train like one at N times the price"
        " (PatrickHua/SimSiam#16, Shark-NLP/DiffuSeq#37, Parskatt/RoMa#32)."
    ),
    example=(
        "import torch\nimport torch.distributed as dist\n"
        "from torch.nn.parallel import DistributedDataParallel as DDP\n"
        "from torch.utils.data import DataLoader\n\n"
        "dist.init_process_group('nccl')\n"
        "model = DDP(build_model().cuda(), device_ids=[local_rank])\n"
        "loader = DataLoader(train_set, batch_size=64, shuffle=True)\n"
        "for epoch in range(10):\n"
        "    for x, y in loader:\n"
        "        model(x).sum().backward()\n"
    ),
    fixed=(
        "import torch\nimport torch.distributed as dist\n"
        "from torch.nn.parallel import DistributedDataParallel as DDP\n"
        "from torch.utils.data import DataLoader\n"
        "from torch.utils.data.distributed import DistributedSampler\n\n"
        "dist.init_process_group('nccl')\n"
        "model = DDP(build_model().cuda(), device_ids=[local_rank])\n"
        "sampler = DistributedSampler(train_set)\n"
        "loader = DataLoader(train_set, batch_size=64, sampler=sampler)\n"
        "for epoch in range(10):\n"
        "    sampler.set_epoch(epoch)\n"
        "    for x, y in loader:\n"
        "        model(x).sum().backward()\n"
    ),
)
RULES = (TRG025,)

_RANDOM_SAMPLERS = frozenset({"RandomSampler", "WeightedRandomSampler", "SubsetRandomSampler"})
# What a dataset sharded per rank is built with: `ds.shard(num_shards=world, index=rank)`,
# `split_dataset_by_node`, webdataset's `split_by_node`, a `num_replicas=` of its own.
_SHARD_WORDS = ("rank", "world", "shard", "replica", "split_by_node", "by_node", "num_gpus", "nodes")
_EVAL_WORDS = ("val", "test", "eval")


def _sampler_kind(ctx: Context, call: Call) -> str | None:
    """'random' for a plain random sampler, 'other' for any other sampler given, None for none."""
    given = call.kwarg("sampler") or call.kwarg("batch_sampler")
    if given is None or (isinstance(given, ast.Constant) and given.value is None):
        return None
    built = given if isinstance(given, ast.Call) else None
    if isinstance(given, ast.Name):
        scope = ctx.script.scope_of(call.node)
        values = [
            node.value
            for node in ctx.script.of_type(ast.Assign)
            if ctx.script.scope_of(node) is scope and [dotted(t) for t in node.targets] == [given.id]
        ]
        built = values[0] if len(values) == 1 and isinstance(values[0], ast.Call) else None
    tail = (ctx.script.qual(built.func) or "").rsplit(".", 1)[-1] if built is not None else ""
    return "random" if tail in _RANDOM_SAMPLERS else "other"


def _dataset_text(ctx: Context, call: Call) -> str:
    """The dataset argument and, for a name, what it is assigned in the same function."""
    data = call.node.args[0] if call.node.args else call.kwarg("dataset")
    if data is None:
        return ""
    texts = [ast.unparse(data)]
    scope = ctx.script.scope_of(call.node)
    for assign in ctx.script.of_type(ast.Assign):
        if ctx.script.scope_of(assign) is scope and dotted(data) in {dotted(t) for t in assign.targets}:
            texts.append(ast.unparse(assign.value))
            for inner in ast.walk(assign.value):  # `train_set = build_dataset(args)` of this file
                builder = ctx.script.local_function(inner) if isinstance(inner, ast.Call) else None
                if builder is not None:
                    texts.append(ast.unparse(builder))
    for node in ast.walk(scope):  # `train_ds = train_ds.shard(...)` anywhere in the function
        if isinstance(node, ast.Call) and dotted(node.func).startswith(dotted(data) + "."):
            texts.append(ast.unparse(node))
    return " ".join(texts).lower()


def _shards_itself(ctx: Context) -> bool:
    """A script that splits the data itself: a distributed sampler or a rank-sliced dataset anywhere."""
    for call in ctx.script.call_list:
        tail = call.tail
        if "Sampler" in tail and tail not in _RANDOM_SAMPLERS and tail != "SequentialSampler":
            return True  # DistributedSampler, a project's DistributedBucketSampler, ...
        if tail in ("split_dataset_by_node", "split_by_node", "shard"):
            return True
    return False


def check(ctx: Context) -> Iterator[Finding]:
    """Every finding of this module's rules on one script."""
    script = ctx.script
    if script.frameworks & {"lightning", "hf_trainer", "accelerate"}:
        return
    if not ctx.wrappers.of_kind("ddp", "fsdp", "fsdp2") or _shards_itself(ctx):
        return
    for call in script.calls("DataLoader"):
        if not call.name.startswith(("torch.", "DataLoader")):
            continue
        sampler = _sampler_kind(ctx, call)
        if sampler == "other" or (sampler is None and not kwarg_true(call, "shuffle")):
            continue
        data = _dataset_text(ctx, call)
        if any(word in data for word in _SHARD_WORDS) or any(word in data for word in _EVAL_WORDS):
            continue
        if (
            for_evaluation(ctx, call.node)
            or not ctx.ranks.per_rank(call.node)
            or not anchored(ctx, call.node)
        ):
            continue
        holder = script.parents.get(call.node)
        names = {dotted(t) for t in holder.targets} if isinstance(holder, ast.Assign) else set()
        if names & run_arguments(ctx):
            continue
        how = "a plain random sampler" if sampler == "random" else "shuffle=True"
        yield ctx.finding(
            TRG025,
            call.node,
            f"this DataLoader draws from the whole dataset with {how} and no DistributedSampler, in a script"
            " that wraps its model in DDP/FSDP: every rank trains on all of the data (an epoch is N times"
            " the work, and with one seed the ranks see the same batches); use"
            " sampler=DistributedSampler(dataset) and set_epoch",
        )
