"""D3: where the model is when DDP wraps it.

TRG004: `DistributedDataParallel(model, device_ids=[...])` on a model that is still on the CPU (built
        and never moved with `.to()`/`.cuda()`): DDP raises ValueError at once.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from triage.core.lint.context import Context
from triage.core.lint.model import Finding, Rule
from triage.core.lint.patterns import value_before
from triage.core.lint.script import Call, dotted
from triage.core.lint.wrappers import wrapper_kind

TRG004 = Rule(
    code="TRG004",
    entry="D3",
    severity="error",
    name="ddp-module-on-cpu",
    message="DDP is given device_ids for a model that is still on the CPU: it raises ValueError",
    fix="move the model to this rank's GPU first (`model.to(local_rank)`), then wrap it",
    finds=(
        "`DistributedDataParallel(model, device_ids=[...])` where `model` was just built (a module class"
        " of the file or imported from the project, `torch.nn.*`, `torchvision.models.*` and"
        " `models.__dict__[arch]()`, `timm.create_model`, a Transformers"
        " `from_pretrained` without `device_map`) and nothing between the two moves it; also"
        " `DDP(Net(), device_ids=[...])`. A model built under `with torch.device(...)`, or in a script"
        " that sets a default device, is not reported. Without device_ids: such a model wrapped by"
        " `DDP(model)` and only moved with `.to(device)` / `.cuda()` after the wrap."
    ),
    why=(
        "`device_ids` tells DDP which GPU holds the module; DDP checks that the parameters are there and"
        ' stops with "DistributedDataParallel device_ids and output_device arguments only work with'
        " single-device/multiple-device GPU modules or CPU modules, but got device_ids [0], ...,"
        " and module parameters {device(type='cpu')}\". `torch.cuda.set_device` selects the GPU new"
        " tensors go to, but does not move a module that already exists."
    ),
    example=(
        "import os\nimport torch\nimport torch.distributed as dist\n"
        "from torch.nn.parallel import DistributedDataParallel as DDP\n\n"
        "local_rank = int(os.environ['LOCAL_RANK'])\n"
        "dist.init_process_group('nccl')\n"
        "torch.cuda.set_device(local_rank)\n"
        "model = torch.nn.Linear(10, 10)\n"
        "model = DDP(model, device_ids=[local_rank])\n"
    ),
    fixed=(
        "import os\nimport torch\nimport torch.distributed as dist\n"
        "from torch.nn.parallel import DistributedDataParallel as DDP\n\n"
        "local_rank = int(os.environ['LOCAL_RANK'])\n"
        "dist.init_process_group('nccl')\n"
        "torch.cuda.set_device(local_rank)\n"
        "model = torch.nn.Linear(10, 10).to(local_rank)\n"
        "model = DDP(model, device_ids=[local_rank])\n"
    ),
)
RULES = (TRG004,)

_PLACING_KWARGS = frozenset({"device", "device_map", "torch_device"})
_PLACING_WORDS = ("cuda", ".to(", "device", "gpu", "rank")
_DEFAULT_DEVICE = frozenset({"set_default_device", "set_default_tensor_type"})


def _device_ids(call: Call) -> ast.expr | None:
    given = call.kwarg("device_ids") or (call.node.args[1] if len(call.node.args) > 1 else None)
    return None if isinstance(given, ast.Constant) and given.value is None else given


def _built_on_cpu(ctx: Context, value: ast.expr) -> bool:
    """Whether `value` builds a module on the CPU: a constructor call that places nothing."""
    if not isinstance(value, ast.Call) or any(
        k.arg is None or k.arg in _PLACING_KWARGS for k in value.keywords
    ):
        return False
    func = value.func
    if isinstance(func, ast.Subscript) and dotted(func.value).endswith("models.__dict__"):
        func = func.value  # torchvision's `models.__dict__[args.arch]()`
    name = ctx.script.qual(func) or ""
    if "()" in name:  # a method of something built: `resnet50().cuda()`, `Net().to(device)`
        return False
    tail = name.rsplit(".", 1)[-1]
    if isinstance(func, ast.Name) and func.id in ctx.script.classes:
        source = ast.get_source_segment(ctx.script.source, ctx.script.classes[func.id]) or ""
        return not any(word in source for word in _PLACING_WORDS)
    if isinstance(func, ast.Name) and func.id in ctx.script.imports and tail[:1].isupper():
        # A model class imported from the project (`from models import Net`): built where it is
        # called, unless it is handed something that names a device, by position or by keyword
        # (fairchem's `OCPDataParallel(self.model, output_device=self.device, num_gpus=1)`).
        given = [ast.unparse(arg).lower() for arg in value.args]
        given += [f"{k.arg}={ast.unparse(k.value)}".lower() for k in value.keywords]
        return not any(word in text for text in given for word in _PLACING_WORDS)
    if name.startswith("torch.nn.") and tail[:1].isupper() and "parallel" not in name:
        return True
    if name.startswith("torchvision.models."):
        return True
    if name == "timm.create_model":
        return True
    return name.startswith("transformers.") and tail == "from_pretrained"


def _device_context(ctx: Context, node: ast.AST) -> bool:
    """Whether `node` runs under `with torch.device(...):`, which builds modules on that device."""
    return any(
        isinstance(parent, ast.With) and any("device" in ast.unparse(i.context_expr) for i in parent.items)
        for parent in ctx.script.ancestors(node)
    )


def check(ctx: Context) -> Iterator[Finding]:
    """Every finding of this module's rules on one script."""
    if any(ctx.script.calls(*_DEFAULT_DEVICE)):
        return
    for call in ctx.script.call_list:
        if wrapper_kind(ctx.script, call.node) != "ddp":
            continue
        module = call.node.args[0] if call.node.args else call.kwarg("module")
        if module is None:
            continue
        moved = None if _device_ids(call) is not None else _moved_after(ctx, call, module)
        if _device_ids(call) is None and moved is None:
            continue
        built = module if isinstance(module, ast.Call) else value_before(ctx.script, module, call.node)
        if built is None or not _built_on_cpu(ctx, built) or _device_context(ctx, built):
            continue
        what = ctx.script.text(module, 30)
        origin = "" if built is module else f" (`{ctx.script.text(built, 40)}` at line {built.lineno})"
        yield ctx.finding(
            TRG004,
            call.node,
            f"`{what}` is still on the CPU here{origin} and DDP is given device_ids: it raises ValueError"
            " (device_ids only work with GPU modules); move it to this rank's GPU first, then wrap it"
            if moved is None
            else f"`{what}` is still on the CPU when DDP wraps it{origin}, and is only moved to the GPU"
            f" after, at line {moved.lineno}: DDP has already registered and broadcast the CPU"
            " parameters; move it to this rank's GPU first, then wrap it",
        )


def _moved_after(ctx: Context, call: Call, module: ast.expr) -> ast.Call | None:
    """`net = DDP(net)` then `net.to(device)` / `net.cuda()` later in the same function: the author
    meant a GPU model but wrapped it on the CPU (narumiruna/pytorch-distributed-example#11)."""
    names = {dotted(module)}
    for parent in ctx.script.ancestors(call.node):
        if isinstance(parent, ast.Assign) and parent.value is call.node:
            names.update(dotted(t) for t in parent.targets)
        if isinstance(parent, ast.stmt):
            break
    names.discard("")
    scope = ctx.script.scope_of(call.node)
    for node in ast.walk(scope):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.lineno > call.node.lineno
            and dotted(node.func.value) in names
        ):
            continue
        if node.func.attr == "cuda" or (
            node.func.attr == "to"
            and any(w in ast.unparse(a).lower() for a in node.args for w in _PLACING_WORDS)
        ):
            return node
    return None
