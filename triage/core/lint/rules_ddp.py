"""DDP settings and what data parallelism changes: D8, D10, D11, and E8 (compile before wrapping).

TRG008: `find_unused_parameters=True` in any of its spellings.
TRG010: BatchNorm in a DDP model that is never converted to SyncBatchNorm.
TRG011: the global batch grows with the world size while the learning rate does not.
TRG051: `torch.compile` applied before the FSDP1 wrapper (DDP is fine either way).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from triage.core.lint.context import Context
from triage.core.lint.model import Finding, Rule
from triage.core.lint.patterns import OPTIMIZER_TAILS, WorldSize, find_unused_spelling, kwarg_true, world_size
from triage.core.lint.rules_checkpointing import reentrant_checkpoint
from triage.core.lint.script import Call, dotted

TRG008 = Rule(
    code="TRG008",
    entry="D8",
    severity="info",
    name="find-unused-parameters",
    message="find_unused_parameters=True walks the autograd graph after every forward",
    fix="turn it off when every parameter gets a gradient, or use static_graph=True when the unused set never changes",
    fact="lint.find_unused_parameters",
    finds=(
        "`DDP(..., find_unused_parameters=True)`, `DistributedDataParallelKwargs(find_unused_parameters=True)`,"
        " `TrainingArguments(ddp_find_unused_parameters=True)`, `DDPStrategy(find_unused_parameters=True)`"
        " and Lightning's `strategy='ddp_find_unused_parameters_true'`."
    ),
    why=(
        "The flag makes DDP traverse the autograd graph after each forward to mark parameters that"
        " get no gradient: a cost on every step, noticeable on large models. It is often left on after"
        " one error, and it can hide a real bug (a head dropped from the loss). DDP warns when it"
        " finds nothing unused; heed it."
    ),
    example=(
        "from torch.nn.parallel import DistributedDataParallel as DDP\n\n"
        "model = DDP(model, device_ids=[local_rank], find_unused_parameters=True)\n"
    ),
    fixed=(
        "from torch.nn.parallel import DistributedDataParallel as DDP\n\n"
        "model = DDP(model, device_ids=[local_rank])\n"
    ),
)
TRG010 = Rule(
    code="TRG010",
    entry="D10",
    severity="info",
    name="batchnorm-without-syncbn",
    message="BatchNorm under DDP normalises with per-GPU batch statistics",
    fix="convert with `torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)` before wrapping in DDP, if the per-GPU batch is small",
    fact="lint.batchnorm_without_sync",
    finds=(
        "A model with BatchNorm (`nn.BatchNorm1d/2d/3d`, or a torchvision ResNet, DenseNet, MobileNet,"
        " EfficientNet, RegNet, ...) wrapped in DDP, prepared by Accelerate or trained by a Lightning"
        " `ddp` strategy, when nothing in the script converts it to SyncBatchNorm."
    ),
    why=(
        "DDP averages gradients, not batch statistics: each GPU normalises with the mean and variance"
        " of its own small batch, and the running statistics come from rank 0 alone. With small"
        " per-GPU batches the model trains differently from the single-GPU run at the same global batch."
    ),
    example=(
        "import torch.nn as nn\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n\n"
        "model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8))\n"
        "model = DDP(model.to(device), device_ids=[local_rank])\n"
    ),
    fixed=(
        "import torch.nn as nn\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n\n"
        "model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8))\n"
        "model = nn.SyncBatchNorm.convert_sync_batchnorm(model)\n"
        "model = DDP(model.to(device), device_ids=[local_rank])\n"
    ),
)
TRG011 = Rule(
    code="TRG011",
    entry="D11",
    severity="info",
    name="lr-not-scaled",
    message="the global batch grows with the number of GPUs while the learning rate stays the same",
    fix="divide the per-rank batch (or accumulation) by the world size, or scale the learning rate with it",
    fact="lint.lr_not_scaled",
    finds=(
        "A data-parallel script (DDP, FSDP, DeepSpeed or Accelerate) that builds an optimizer whose"
        " learning rate does not involve the world size, while nothing divides the per-rank batch or"
        " the accumulation steps by the world size (`dist.get_world_size()`, `world_size`,"
        " `accelerator.num_processes`, ...) and `split_batches` is not on."
    ),
    why=(
        "Every rank draws `batch_size` samples per step, so one optimizer step sees"
        " `batch_size x world_size x accumulation` samples. Moving from 1 to 8 GPUs makes the step 8x"
        " larger with the LR tuned for the small batch: the run trains differently and nothing errors."
        " A run on 8 GPUs is then a different experiment from the same config on 1."
    ),
    example=(
        "import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n\n"
        "model = DDP(model, device_ids=[local_rank])\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)\n"
    ),
    fixed=(
        "import torch\nimport torch.distributed as dist\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n\n"
        "model = DDP(model, device_ids=[local_rank])\n"
        "lr = args.lr * dist.get_world_size()  # linear scaling from the 1-GPU recipe\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=lr)\n"
    ),
)
TRG051 = Rule(
    code="TRG051",
    entry="E8",
    severity="warning",
    name="compile-before-wrap",
    message="torch.compile is applied before the FSDP (FSDP1) wrapper",
    fix="wrap first, then compile: `model = torch.compile(FSDP(model, use_orig_params=True, ...))`",
    fact="lint.compile_before_wrap",
    finds=(
        "`FSDP(...)` (FSDP1) whose module was compiled first: `FSDP(torch.compile(model))`, or"
        " `model = torch.compile(model)` / `model.compile()` earlier in the same function. DDP is not"
        " reported: Dynamo finds the DDP module around a compiled inner module and splits its graph at"
        " the buckets (DDPOptimizer), and PyTorch's guide compiles the module passed to DDP."
    ),
    why=(
        "FSDP1 replaces the module's parameters with views of its flat parameters and wraps the"
        " submodules its policy names; a module compiled before that has its graph traced on the old"
        " module tree, so it breaks at every flat-parameter boundary and recompiles. Wrapped first"
        " (with `use_orig_params=True`), the compiled graph sees the sharded module as it runs."
    ),
    example=(
        "import torch\nfrom torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n\n"
        "model = torch.compile(model)\n"
        "model = FSDP(model, auto_wrap_policy=policy, use_orig_params=True)\n"
    ),
    fixed=(
        "import torch\nfrom torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n\n"
        "model = FSDP(model, auto_wrap_policy=policy, use_orig_params=True)\n"
        "model = torch.compile(model)\n"
    ),
)
RULES = (TRG008, TRG010, TRG011, TRG051)

_BN_MODELS = re.compile(
    r"^(resnet\d|resnext|wide_resnet|densenet|mobilenet|efficientnet|regnet|inception|googlenet|mnasnet|shufflenet|vgg\d+_bn)"
)


def _check_unused(ctx: Context) -> Iterator[Finding]:
    if reentrant_checkpoint(ctx) is not None:
        return  # TRG007 says more: the flag does not just cost time there, it fails the backward
    for call in ctx.script.call_list:
        where = find_unused_spelling(call)
        if where is None:
            continue
        yield ctx.finding(
            TRG008,
            call.node,
            f"{where} makes DDP walk the autograd graph after every forward; keep it only if some"
            " parameters really get no gradient (DDP warns when none are unused)",
        )


def _batchnorm_evidence(ctx: Context) -> ast.AST | None:
    script = ctx.script
    for node in [*script.of_type(ast.Attribute), *script.of_type(ast.Name), *script.of_type(ast.Call)]:
        if isinstance(node, ast.Attribute | ast.Name):
            name = script.qual(node) or ""
            tail = name.rsplit(".", 1)[-1]
            if re.fullmatch(r"BatchNorm[123]d", tail) and name.startswith("torch"):
                return node
        if isinstance(node, ast.Call):
            name = script.qual(node.func) or ""
            if name.startswith("torchvision") and _BN_MODELS.match(name.rsplit(".", 1)[-1]):
                return node
    return None


def _check_batchnorm(ctx: Context) -> Iterator[Finding]:
    script = ctx.script
    if script.mentions(
        "SyncBatchNorm", "convert_sync_batchnorm", "sync_batchnorm", "sync_bn"
    ) or "syncbn" in {s.lower() for s in script.strings}:
        return
    sites = ctx.wrappers.sites
    wrapped = sites.get("ddp") or sites.get("prepared") or []
    target: ast.Call | None = wrapped[0] if wrapped else None
    if target is None:
        for call in script.calls("Trainer"):
            strategy = call.kwarg("strategy")
            if (
                isinstance(strategy, ast.Constant)
                and "ddp" in str(strategy.value)
                and ctx.wrappers.kind(call.node, call.scope)
            ):
                target = call.node
    evidence = _batchnorm_evidence(ctx) if target is not None else None
    if target is None or evidence is None:
        return
    yield ctx.finding(
        TRG010,
        target,
        f"the model has BatchNorm (`{script.text(evidence, 30)}`, line {getattr(evidence, 'lineno', 0)}) and is"
        " trained data-parallel without SyncBatchNorm: each GPU normalises with its own batch statistics",
    )


def _lr_of(call: Call) -> ast.AST | None:
    lr = call.kwarg("lr") or call.kwarg("learning_rate")
    if lr is None and len(call.node.args) > 1:
        lr = call.node.args[1]
    return lr


def _world_size_considered(ctx: Context, world: WorldSize) -> bool:
    script = ctx.script
    if any(kwarg_true(c, "split_batches") for c in script.call_list):
        return True
    for node in [*script.of_type(ast.BinOp), *script.of_type(ast.AugAssign), *script.of_type(ast.Assign)]:
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div | ast.FloorDiv):
            if world.depends_on(node.right):  # `grad_accum = total_batch // (B * T * world_size)`
                return True
        elif isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Div | ast.FloorDiv | ast.Mult):
            if world.mentioned_in(node.value) and (
                isinstance(node.op, ast.Div | ast.FloorDiv) or _lr_name(node.target)
            ):
                return True
        elif (
            isinstance(node, ast.Assign)
            and any(_lr_name(t) for t in node.targets)
            and world.depends_on(node.value)
        ):
            return True
    return False


def _lr_name(target: ast.AST) -> bool:
    text = dotted(target).rsplit(".", 1)[-1].lower()
    return text in ("lr", "base_lr") or "learning_rate" in text or text.endswith("_lr")


def _check_lr(ctx: Context) -> Iterator[Finding]:
    if not ctx.wrappers.of_kind("ddp", "fsdp", "fsdp2", "prepared", "deepspeed"):
        return
    world = world_size(ctx.script)
    optimizers = [
        c
        for c in ctx.script.call_list
        if c.tail in OPTIMIZER_TAILS
        and (
            c.name.startswith(("torch.optim", "transformers", "deepspeed", "bitsandbytes", "apex"))
            or c.name == c.tail
        )
    ]
    if not optimizers or _world_size_considered(ctx, world):
        return
    for call in optimizers:
        lr = _lr_of(call)
        if lr is None or world.depends_on(lr):
            continue
        yield ctx.finding(
            TRG011,
            call.node,
            f"the learning rate (`{ctx.script.text(lr, 30)}`) does not depend on the world size, and nothing divides"
            " the per-rank batch by it: the global batch grows with the number of GPUs at the same LR",
        )
        return


def _compiled_names(ctx: Context) -> dict[tuple[int, str], int]:
    """(scope id, name) -> line of `name = torch.compile(name)` or `name.compile()`."""
    found: dict[tuple[int, str], int] = {}
    for call in ctx.script.call_list:
        parent = ctx.script.parents.get(call.node)
        if call.name == "torch.compile" and isinstance(parent, ast.Assign):
            for target in parent.targets:
                if dotted(target):
                    found.setdefault((id(call.scope), dotted(target)), call.node.lineno)
        elif (
            call.tail == "compile"
            and call.receiver is not None
            and not call.name.startswith("torch")
            and isinstance(parent, ast.Expr)
            and dotted(call.receiver)
            and not call.node.args
        ):
            found.setdefault((id(call.scope), dotted(call.receiver)), call.node.lineno)
    return found


def _check_compile_order(ctx: Context) -> Iterator[Finding]:
    compiled = _compiled_names(ctx)
    # DDP is left out on purpose: Dynamo sees the active DDP module around a compiled inner module
    # and applies DDPOptimizer there too (torch/_dynamo/convert_frame.py).
    for site in ctx.wrappers.sites.get("fsdp", []):
        if not site.args:
            continue
        module = site.args[0]
        scope = ctx.script.scope_of(site)
        direct = isinstance(module, ast.Call) and ctx.script.qual(module.func) == "torch.compile"
        line = compiled.get((id(scope), dotted(module)), 0)
        if direct or 0 < line < site.lineno:
            when = "inside the wrapper call" if direct else f"at line {line}"
            yield ctx.finding(
                TRG051,
                site,
                f"the module is compiled ({when}) before it is wrapped in FSDP: FSDP1 re-wraps the module"
                " tree under the compiled graph, which breaks and recompiles; wrap first, then compile",
            )


def check(ctx: Context) -> Iterator[Finding]:
    """Every finding of this module's rules on one script."""
    yield from _check_unused(ctx)
    yield from _check_batchnorm(ctx)
    yield from _check_lr(ctx)
    yield from _check_compile_order(ctx)
