"""A data-parallel wrapper built but not trained through: E12 (gradients silently rank-local).

TRG056: a training function (one that calls `backward`) runs the forward through the module a
DDP/FSDP wrapper holds: `ddp = DDP(model)` under a new name, the wrapper never used, and `model(...)`;
or `model.module(...)` of a wrapper, directly or through a name bound to it in the function
(`unwrapped = model.module if isinstance(model, DDP) else model`).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from triage.core.lint.context import Context
from triage.core.lint.model import Finding, Rule
from triage.core.lint.script import Scope, dotted

TRG056 = Rule(
    code="TRG056",
    entry="E12",
    severity="warning",
    name="wrapper-not-trained-through",
    message="the model is wrapped in DDP/FSDP under another name, but training calls the unwrapped module",
    fix=(
        "run the training forward through the wrapper (`ddp_model(x)`), or rebind (`model = DDP(model)`);"
        " [verify] gradients then become averaged across ranks, so the run trains differently"
    ),
    fact="lint.wrapper_not_trained_through",
    finds=(
        "`W = DDP(model, ...)` or `W = FSDP(model, ...)` (also `self.model_ddp = DDP(self.model)`) where"
        " `W` is never used except for attribute access (`W.module`, `W.state_dict()`), while a function"
        " that calls `backward` runs the forward as `model(...)` after the wrap. Not reported: rebinding"
        " (`model = DDP(model)`). Also `W.module(...)` of a wrapper `W`, directly or through a name the"
        " function binds to it (`unwrapped = W.module if ... else W`), in such a function; not"
        " `W.module.encode(...)` or other methods. Not reported: calls under `torch.no_grad()`/`inference_mode`, calls under a rank gate"
        " or in the single-process branch, and functions named for evaluation or sampling."
    ),
    why=(
        "DDP synchronises gradients through hooks that its own forward installs; a forward through the"
        " inner module bypasses them, so `backward` leaves each rank with its own gradients and the"
        " optimizer steps every replica apart. Nothing errors: the job runs N independent trainings on"
        " N shards, and only rank 0's copy is saved. Under FSDP1 the inner module holds flat shards,"
        " so its forward computes on the wrong parameters or fails."
    ),
    example=(
        "from torch.nn.parallel import DistributedDataParallel as DDP\n\n"
        "ddp_model = DDP(model, device_ids=[local_rank])\n"
        "for x, y in loader:\n"
        "    loss = loss_fn(model(x), y)\n"
        "    loss.backward()\n"
        "    optimizer.step()\n"
    ),
    fixed=(
        "from torch.nn.parallel import DistributedDataParallel as DDP\n\n"
        "ddp_model = DDP(model, device_ids=[local_rank])\n"
        "for x, y in loader:\n"
        "    loss = loss_fn(ddp_model(x), y)\n"
        "    loss.backward()\n"
        "    optimizer.step()\n"
    ),
)
RULES = (TRG056,)

_NOT_TRAINING = re.compile(r"eval|valid|test|sampl|generat|infer|predict|visuali|inspect|log|debug|profil")
_NO_GRAD = ("no_grad", "inference_mode", "enable_grad")  # enable_grad: set explicitly, left to the author
_MOVES = ("to", "cuda", "float", "half", "bfloat16", "train")


def _inner(expr: ast.expr) -> str:
    """The module a wrapper call wraps: `model` for `DDP(model.to(device))`."""
    while isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in _MOVES:
        expr = expr.func.value
    return dotted(expr)


def _used(ctx: Context, name: str, scope: Scope, binding: ast.AST) -> bool:
    """Whether the wrapper's name is read other than as `name.attr` (`W.module`, `W.state_dict()`)."""
    script = ctx.script
    nodes: list[ast.Name | ast.Attribute] = [*script.of_type(ast.Name), *script.of_type(ast.Attribute)]
    for node in nodes:
        if node is binding or dotted(node) != name or not isinstance(node.ctx, ast.Load):
            continue
        if isinstance(node, ast.Name) and script.scope_of(node) is not scope:
            continue
        parent = script.parents.get(node)
        if isinstance(parent, ast.Attribute) and parent.attr != "forward":
            continue
        return True
    return False


def _excused(ctx: Context, call: ast.Call) -> bool:
    """Forward calls that need no synchronised gradient: evaluation, sampling, one process."""
    script = ctx.script
    for outer in script.ancestors(call):
        if isinstance(outer, ast.With | ast.AsyncWith) and any(
            _no_grad(ctx, i.context_expr) for i in outer.items
        ):
            return True
        if isinstance(outer, ast.FunctionDef | ast.AsyncFunctionDef) and (
            _NOT_TRAINING.search(outer.name.lower()) or any(_no_grad(ctx, d) for d in outer.decorator_list)
        ):
            return True
    return ctx.ranks.effective_gate(call) is not None or ctx.ranks.single_process(call)


def _no_grad(ctx: Context, expr: ast.expr) -> bool:
    target = expr.func if isinstance(expr, ast.Call) else expr
    name = ctx.script.qual(target) or dotted(target)
    return name.rsplit(".", 1)[-1] in _NO_GRAD


def _trains(ctx: Context, scope: Scope) -> bool:
    return any(c.tail == "backward" and c.scope is scope for c in ctx.script.call_list)


def _forwards(ctx: Context, inner: str, site: ast.Call, scope: Scope) -> Iterator[ast.Call]:
    """Calls `inner(...)` / `inner.forward(...)` that may run after the wrap: later in the same
    function for a plain name, anywhere in the same class for an attribute."""
    script = ctx.script
    attribute = "." in inner
    home = script.enclosing_class(site)
    for call in script.call_list:
        func = call.node.func
        if isinstance(func, ast.Attribute) and func.attr == "forward":
            func = func.value
        if dotted(func) != inner:
            continue
        if attribute:
            if home is None or script.enclosing_class(call.node) is not home:
                continue
        elif call.scope is not scope or call.node.lineno <= site.lineno:
            continue
        yield call.node


def _check(ctx: Context) -> Iterator[Finding]:
    script = ctx.script
    for kind in ("ddp", "fsdp"):
        for site in ctx.wrappers.sites.get(kind, []):
            parent = script.parents.get(site)
            if not site.args or not isinstance(parent, ast.Assign) or len(parent.targets) != 1:
                continue
            target = parent.targets[0]
            wrapper, inner = dotted(target), _inner(site.args[0])
            if not wrapper or not inner or wrapper == inner:
                continue  # `model = DDP(model)` rebinds: everything after it goes through the wrapper
            scope = script.scope_of(site)
            if _used(ctx, wrapper, scope, target):
                continue
            for call in _forwards(ctx, inner, site, scope):
                if _excused(ctx, call) or not _trains(ctx, script.scope_of(call)):
                    continue
                label = "DDP" if kind == "ddp" else "FSDP"
                yield ctx.finding(
                    TRG056,
                    call,
                    f"`{wrapper}` wraps `{inner}` in {label} (line {site.lineno}) and is never called, but this"
                    f" training forward calls the unwrapped `{script.text(call, 40)}`: no gradient is"
                    f" synchronised, each rank trains its own copy; call `{wrapper}(...)` here"
                    " ([verify]: gradients become averaged across ranks, the run trains differently)",
                )
                break


def _inner_of_wrapper(ctx: Context, expr: ast.AST, scope: Scope) -> str:
    """`model` for `model.module` when a DDP/FSDP wrapper bound `model` ("" otherwise)."""
    if isinstance(expr, ast.IfExp):  # `model.module if isinstance(model, DDP) else model`
        return _inner_of_wrapper(ctx, expr.body, scope) or _inner_of_wrapper(ctx, expr.orelse, scope)
    if (
        isinstance(expr, ast.Attribute)
        and expr.attr == "module"
        and ctx.wrappers.kind(expr.value, scope) in ("ddp", "fsdp")
    ):
        return dotted(expr.value)
    return ""


def _check_module_forward(ctx: Context) -> Iterator[Finding]:
    script = ctx.script
    aliases: dict[tuple[int, str], str] = {}  # (scope, name) -> the wrapper whose .module it holds
    for node in script.of_type(ast.Assign):
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            scope = script.scope_of(node)
            wrapper = _inner_of_wrapper(ctx, node.value, scope)
            if wrapper:
                aliases[(id(scope), node.targets[0].id)] = wrapper
    reported: set[int] = set()
    for call in ctx.script.call_list:
        func = call.node.func
        if isinstance(func, ast.Attribute) and func.attr == "forward":
            func = func.value
        wrapper = _inner_of_wrapper(ctx, func, call.scope)
        if not wrapper and isinstance(func, ast.Name):
            wrapper = aliases.get((id(call.scope), func.id), "")
        if (
            not wrapper
            or id(call.scope) in reported
            or _excused(ctx, call.node)
            or not _trains(ctx, call.scope)
        ):
            continue
        reported.add(id(call.scope))
        yield ctx.finding(
            TRG056,
            call.node,
            f"this training forward calls `{script.text(call.node, 40)}`, the module inside the"
            f" `{wrapper}` wrapper, not the wrapper: DDP's gradient hooks are armed by its own forward,"
            f" so no gradient is synchronised and each rank trains its own copy; call `{wrapper}(...)`"
            " ([verify]: gradients become averaged across ranks, the run trains differently)",
        )


def check(ctx: Context) -> Iterator[Finding]:
    """Every finding of this module's rules on one script."""
    yield from _check(ctx)
    yield from _check_module_forward(ctx)
