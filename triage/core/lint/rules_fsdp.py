"""FSDP wrapping and precision (D12, D14) and DeviceMesh shape (E6).

TRG012: the whole model is one FSDP unit (`FSDP(model)` without a wrap policy, `fully_shard` on the root only).
TRG014: MixedPrecision / MixedPrecisionPolicy with a low-precision param_dtype and no reduce_dtype.
TRG032: FSDP1 MixedPrecision without buffer_dtype.
TRG033: the plain GradScaler with FSDP (FSDP needs ShardedGradScaler).
TRG050: a DeviceMesh whose shape is a hard-coded number of ranks.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Iterator

from triage.core.lint.context import Context
from triage.core.lint.model import Finding, Rule
from triage.core.lint.patterns import guards, loops_of, ruled_out, world_size
from triage.core.lint.script import Call, const_int

TRG012 = Rule(
    code="TRG012",
    entry="D12",
    severity="warning",
    name="fsdp-single-unit",
    message="the whole model is one FSDP unit, so its parameters are gathered all at once",
    fix="pass an auto_wrap_policy (transformer_auto_wrap_policy on the block class), or fully_shard each block before the root",
    fact="lint.fsdp_single_unit",
    finds=(
        "`FSDP(model, ...)` without `auto_wrap_policy` when it is the only FSDP wrapper in the script"
        " (no nested `FSDP(...)`, `wrap()` or `enable_wrap`), and `fully_shard(model)` called once,"
        " on the root, outside any loop."
    ),
    why=(
        "FSDP gathers the full parameters of one unit just before it runs. With the whole model as one"
        " unit the first forward all-gathers every weight and keeps them until backward ends, so peak"
        " memory holds a full unsharded copy: little is saved over DDP."
    ),
    example=(
        "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n\n"
        "model = FSDP(model, device_id=local_rank)\n"
    ),
    fixed=(
        "import functools\n"
        "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
        "from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy\n\n"
        "policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={Block})\n"
        "model = FSDP(model, auto_wrap_policy=policy, device_id=local_rank)\n"
    ),
)
TRG014 = Rule(
    code="TRG014",
    entry="D14",
    severity="warning",
    name="fsdp-low-precision-reduce",
    message="MixedPrecision sets param_dtype but not reduce_dtype, so gradients are reduced in low precision",
    fix="set `reduce_dtype=torch.float32` next to `param_dtype`",
    fact="lint.fsdp_low_precision_reduce",
    finds=(
        "`MixedPrecision(param_dtype=torch.bfloat16)` (FSDP1) or `MixedPrecisionPolicy(param_dtype=...)`"
        " (FSDP2) with a 16-bit `param_dtype` and no `reduce_dtype`."
    ),
    why=(
        "When `reduce_dtype` is left as None, FSDP reduce-scatters gradients in `param_dtype`. Summing"
        " every rank's gradient in bf16 (8-bit mantissa) drops small contributions, more so on more"
        " ranks: slower convergence or divergence that DDP with autocast never showed."
    ),
    example=(
        "import torch\nfrom torch.distributed.fsdp import MixedPrecision\n\n"
        "mp = MixedPrecision(param_dtype=torch.bfloat16, buffer_dtype=torch.float32)\n"
    ),
    fixed=(
        "import torch\nfrom torch.distributed.fsdp import MixedPrecision\n\n"
        "mp = MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32, buffer_dtype=torch.float32)\n"
    ),
)
TRG032 = Rule(
    code="TRG032",
    entry="D14",
    severity="info",
    name="fsdp-buffer-dtype-unset",
    message="MixedPrecision leaves buffer_dtype unset, so buffers keep their own dtype",
    fix="set `buffer_dtype` on purpose (torch.float32 keeps BatchNorm statistics and rotary tables exact)",
    finds="FSDP1 `MixedPrecision(param_dtype=...)` with a 16-bit `param_dtype` and no `buffer_dtype`.",
    why=(
        "Without `buffer_dtype` buffers (BatchNorm statistics, rotary `inv_freq`, position tables) stay"
        ' in whatever dtype the module holds, which can clash with bf16 activations ("expected scalar'
        ' type ... but found ..."); set to bf16 they lose bits. Decide which.'
    ),
    example=(
        "import torch\nfrom torch.distributed.fsdp import MixedPrecision\n\n"
        "mp = MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)\n"
    ),
    fixed=(
        "import torch\nfrom torch.distributed.fsdp import MixedPrecision\n\n"
        "mp = MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32, buffer_dtype=torch.float32)\n"
    ),
)
TRG033 = Rule(
    code="TRG033",
    entry="D14",
    severity="warning",
    name="gradscaler-with-fsdp",
    message="the plain GradScaler with FSDP checks only this rank's gradient shard for inf/NaN",
    fix="use `torch.distributed.fsdp.sharded_grad_scaler.ShardedGradScaler`, or train in bf16 without a scaler",
    finds="`GradScaler()` (torch.amp or torch.cuda.amp) in a script that wraps a model in FSDP.",
    why=(
        "FSDP gradients are sharded. The plain scaler looks for inf/NaN in the local shard only, so"
        " ranks disagree on whether to skip a step: some update while others do not, and the shards"
        " drift apart. `ShardedGradScaler` agrees across ranks."
    ),
    example=(
        "import torch\nfrom torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n\n"
        "model = FSDP(model, auto_wrap_policy=policy)\n"
        "scaler = torch.cuda.amp.GradScaler()\n"
    ),
    fixed=(
        "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
        "from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler\n\n"
        "model = FSDP(model, auto_wrap_policy=policy)\n"
        "scaler = ShardedGradScaler()\n"
    ),
)
TRG050 = Rule(
    code="TRG050",
    entry="E6",
    severity="warning",
    name="hard-coded-device-mesh",
    message="the DeviceMesh shape is a fixed number of ranks, not the world size",
    fix="derive the mesh from `dist.get_world_size()` (e.g. `(world // 8, 8)`), or assert that they match",
    fact="lint.mesh_size_fixed",
    finds=(
        "`init_device_mesh(device, (2, 8))` or `DeviceMesh(device, list(range(8)))` with literal sizes,"
        " in a script that never compares the mesh size with the world size."
    ),
    why=(
        "A mesh must describe exactly the ranks in the process group. A hard-coded `(1, 8)` mesh run on"
        " 16 ranks leaves the second node outside it (or fails at start-up), and the same script on 4"
        " GPUs cannot build it at all."
    ),
    example=(
        "from torch.distributed.device_mesh import init_device_mesh\n\n"
        "mesh = init_device_mesh('cuda', (2, 8), mesh_dim_names=('replicate', 'shard'))\n"
    ),
    fixed=(
        "import torch.distributed as dist\nfrom torch.distributed.device_mesh import init_device_mesh\n\n"
        "world = dist.get_world_size()\n"
        "mesh = init_device_mesh('cuda', (world // 8, 8), mesh_dim_names=('replicate', 'shard'))\n"
    ),
)
RULES = (TRG012, TRG014, TRG032, TRG033, TRG050)

_LOW = ("bfloat16", "float16", "half", "bf16", "fp16")


def _check_wrap(ctx: Context) -> Iterator[Finding]:
    script = ctx.script
    manual = any(
        c.tail in ("wrap", "enable_wrap") and c.name.startswith("torch.distributed") for c in script.call_list
    )
    fsdp = ctx.wrappers.sites.get("fsdp", [])
    if len(fsdp) == 1 and not manual:
        call = fsdp[0]
        policy = next((k.value for k in call.keywords if k.arg == "auto_wrap_policy"), None)
        star = any(k.arg is None for k in call.keywords)
        unset = policy is None or (isinstance(policy, ast.Constant) and policy.value is None)
        if unset and not star and not loops_of(script, call):
            yield ctx.finding(
                TRG012,
                call,
                "FSDP(...) without auto_wrap_policy makes the whole model one unit: the first forward gathers"
                " every parameter at once and memory barely drops compared with DDP",
            )
    shards = ctx.wrappers.sites.get("fsdp2", [])
    if len(shards) == 1 and not loops_of(script, shards[0]) and not _in_comprehension(ctx, shards[0]):
        yield ctx.finding(
            TRG012,
            shards[0],
            "fully_shard() is applied only to the root module: the whole model is one unit; call fully_shard"
            " on each block first, then on the root",
        )


def _in_comprehension(ctx: Context, node: ast.AST) -> bool:
    return any(
        isinstance(p, ast.ListComp | ast.GeneratorExp | ast.SetComp) for p in ctx.script.ancestors(node)
    )


def _argument(call: Call, name: str, position: int) -> ast.AST | None:
    value = call.kwarg(name)
    if value is None and len(call.node.args) > position:
        value = call.node.args[position]
    return value


def _low_precision(ctx: Context, expr: ast.AST | None) -> bool:
    if expr is None or (isinstance(expr, ast.Constant) and expr.value is None):
        return False
    text = ctx.script.text(expr, 80)
    return any(word in text for word in _LOW) or not any(w in text for w in ("float32", "float", "fp32"))


def _check_precision(ctx: Context) -> Iterator[Finding]:
    for call in ctx.script.calls("MixedPrecision", "MixedPrecisionPolicy"):
        if not call.name.startswith("torch.distributed") or call.has_star_kwargs():
            continue
        param = _argument(call, "param_dtype", 0)
        if not _low_precision(ctx, param):
            continue
        assert param is not None
        dtype = ctx.script.text(param, 30)
        if _argument(call, "reduce_dtype", 1) is None and not _untrained(ctx, call):
            yield ctx.finding(
                TRG014,
                call.node,
                f"{call.tail}(param_dtype={dtype}) without reduce_dtype: gradients are reduce-scattered in {dtype}"
                " across every rank, which drops small contributions; set reduce_dtype=torch.float32",
            )
        if call.tail == "MixedPrecision" and _argument(call, "buffer_dtype", 2) is None:
            yield ctx.finding(
                TRG032,
                call.node,
                "MixedPrecision without buffer_dtype leaves buffers (BatchNorm statistics, rotary tables) in"
                " whatever dtype the module holds; set it on purpose",
            )


def _wrapped_names(ctx: Context, wrap: ast.Call) -> set[str]:
    """The names the FSDP unit built by `wrap` is bound to: `x = FSDP(...)`, or, where a helper
    returns it, the targets of the helper's calls (`text_encoder = setup_lm_fsdp_sync(text_encoder)`)."""
    parent = ctx.script.parents.get(wrap)
    if not isinstance(parent, ast.Assign | ast.Return):
        return set()
    bound = set() if isinstance(parent, ast.Return) else _names(parent)
    scope = ctx.script.scope_of(wrap)
    returned = isinstance(parent, ast.Return) or any(
        isinstance(n, ast.Return) and isinstance(n.value, ast.Name) and n.value.id in bound
        for n in ast.walk(scope)
    )
    if not returned or not isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
        return bound
    callers = (
        ctx.script.parents.get(c.node)
        for c in ctx.script.call_list
        if ctx.script.local_function(c.node) is scope
    )
    return {name for assign in callers if isinstance(assign, ast.Assign) for name in _names(assign)}


def _names(assign: ast.Assign) -> set[str]:
    return {t.id for t in assign.targets if isinstance(t, ast.Name)}


def _untrained(ctx: Context, precision: Call) -> bool:
    """The MixedPrecision of an FSDP unit no optimizer of the file is built on (a frozen text encoder
    run under no_grad): it reduces no gradients, so reduce_dtype does not matter."""
    wrap = ctx.script.parents.get(precision.node)
    wrap = ctx.script.parents.get(wrap) if isinstance(wrap, ast.keyword) else None
    if not (
        isinstance(wrap, ast.Call)
        and ctx.script.text(wrap.func, 60).endswith(("FSDP", "FullyShardedDataParallel"))
    ):
        return False
    names = _wrapped_names(ctx, wrap)
    optimizers = [c for c in ctx.script.call_list if c.name.startswith("torch.optim.") and c.node.args]
    if not names or not optimizers:
        return False
    used = {n.id for c in optimizers for n in ast.walk(c.node.args[0]) if isinstance(n, ast.Name)}
    return not names & used


def _check_scaler(ctx: Context) -> Iterator[Finding]:
    sites = ctx.wrappers.sites.get("fsdp")
    if not sites:
        return
    # The conditions every FSDP wrap runs under (`if args.fsdp:`): a scaler made where one is false
    # (`assert not args.fsdp`) never meets FSDP.
    shared = set.intersection(*(guards(ctx.script, site) for site in sites))
    for call in ctx.script.calls("GradScaler"):
        enabled = call.kwarg("enabled")
        if not call.name.startswith("torch") or (
            isinstance(enabled, ast.Constant) and enabled.value is False
        ):
            continue
        if ruled_out(ctx.script, call.node, shared):
            continue
        yield ctx.finding(
            TRG033,
            call.node,
            "GradScaler with FSDP checks only this rank's gradient shard for inf/NaN, so ranks can disagree on"
            " skipping a step; use ShardedGradScaler",
        )


def _literal_size(expr: ast.AST) -> int | None:
    if isinstance(expr, ast.Tuple | ast.List):
        sizes = [const_int(e) for e in expr.elts]
        return math.prod(s for s in sizes if s is not None) if sizes and None not in sizes else None
    if isinstance(expr, ast.Call) and expr.args:
        callee = expr.func
        name = (
            callee.attr
            if isinstance(callee, ast.Attribute)
            else callee.id
            if isinstance(callee, ast.Name)
            else ""
        )
        if name in ("range", "arange") and len(expr.args) == 1:
            return const_int(expr.args[0])
        if name == "list":
            return _literal_size(expr.args[0])
    return const_int(expr)


def _check_mesh(ctx: Context) -> Iterator[Finding]:
    world = world_size(ctx.script)
    checked = any(world.mentioned_in(n.test) for n in ctx.script.of_type(ast.Assert))
    if checked:
        return
    for call in ctx.script.calls("init_device_mesh", "DeviceMesh"):
        if not call.name.startswith("torch.distributed"):
            continue
        shape = call.kwarg("mesh_shape") or call.kwarg("mesh")
        if shape is None and len(call.node.args) > 1:
            shape = call.node.args[1]
        size = _literal_size(shape) if shape is not None else None
        if size is not None and size > 1:
            yield ctx.finding(
                TRG050,
                call.node,
                f"the mesh `{ctx.script.text(shape, 30)}` always spans {size} ranks whatever the world size: on any"  # type: ignore[arg-type]
                " other number of processes ranks fall outside it or it cannot be built; derive it from"
                " dist.get_world_size()",
            )


def check(ctx: Context) -> Iterator[Finding]:
    """Every finding of this module's rules on one script."""
    yield from _check_wrap(ctx)
    yield from _check_precision(ctx)
    yield from _check_scaler(ctx)
    yield from _check_mesh(ctx)
