"""A data-parallel wrapper built but not trained through: E12 (gradients silently rank-local).

TRG056: a training function (one that calls `backward`) runs the forward through the module a
DDP/FSDP wrapper holds: `ddp = DDP(model)` under a new name, the wrapper never used, and `model(...)`;
or `model.module(...)` of a wrapper, directly or through a name bound to it in the function
(`unwrapped = model.module if isinstance(model, DDP) else model`, or `model = model.module` under
`if hasattr(model, "module"):`, the author's own test that `model` may be a wrapper); or a method of
that inner module given data (`unwrapped.decode(z)`) in a training function that never calls the
wrapper itself.
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
        " function binds to it (`unwrapped = W.module if ... else W`), in such a function; `W` is a"
        " wrapper when a DDP/FSDP call bound it, or when the file wraps in DDP/FSDP and `W.module` sits"
        ' under the author\'s test `hasattr(W, "module")` / `isinstance(W, DDP)`. A method of that'
        " inner module (`W.module.decode(z)`) counts only when given data, not named for evaluation,"
        " sampling or housekeeping (`parameters`, `state_dict`, `get_*`), in a function that never calls"
        " `W` itself. Not reported: calls under `torch.no_grad()`/`inference_mode`, calls under a rank"
        " gate or in the single-process branch, and functions named for evaluation or sampling."
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


def _check(ctx: Context, reported: set[int]) -> Iterator[Finding]:
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
                reported.add(id(script.scope_of(call)))
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
    """`model` for `model.module` when a DDP/FSDP wrapper bound `model`, or when the file wraps in
    DDP/FSDP and the author's own test says `model` may be one (`if hasattr(model, "module"):`)."""
    if isinstance(expr, ast.IfExp):  # `model.module if isinstance(model, DDP) else model`
        return _inner_of_wrapper(ctx, expr.body, scope) or _inner_of_wrapper(ctx, expr.orelse, scope)
    if not (isinstance(expr, ast.Attribute) and expr.attr == "module"):
        return ""
    if ctx.wrappers.kind(expr.value, scope) in ("ddp", "fsdp") or _unwrap_tested(ctx, expr):
        return dotted(expr.value)
    return ""


def _unwrap_tested(ctx: Context, expr: ast.Attribute) -> bool:
    """`X.module` in the branch of a test that `X` is a wrapper (`hasattr(X, "module")`,
    `isinstance(X, DDP)`), in a file that wraps a model in DDP/FSDP."""
    script, wrapped = ctx.script, dotted(expr.value)
    if not wrapped or not (ctx.wrappers.sites.get("ddp") or ctx.wrappers.sites.get("fsdp")):
        return False
    child: ast.AST = expr
    for outer in script.ancestors(expr):
        if isinstance(outer, ast.If | ast.IfExp):
            inside = child in outer.body if isinstance(outer.body, list) else child is outer.body
            if inside and _tests_wrapper(outer.test, wrapped):
                return True
        child = outer
    return False


def _tests_wrapper(test: ast.expr, wrapped: str) -> bool:
    for node in ast.walk(test):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) == 2):
            continue
        subject, what = node.args
        if dotted(subject) != wrapped:
            continue
        if node.func.id == "hasattr" and isinstance(what, ast.Constant) and what.value == "module":
            return True
        if node.func.id == "isinstance" and re.search(
            r"DDP|DistributedDataParallel|FSDP|FullyShard", ast.unparse(what)
        ):
            return True
    return False


def _aliases(ctx: Context) -> dict[tuple[int, str], tuple[str, int]]:
    """(scope, name) -> (the wrapper whose inner module the name holds, the line it is bound on)."""
    script = ctx.script
    aliases: dict[tuple[int, str], tuple[str, int]] = {}
    for node in script.of_type(ast.Assign):
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            scope = script.scope_of(node)
            wrapper = _inner_of_wrapper(ctx, node.value, scope)
            if wrapper:
                aliases[(id(scope), node.targets[0].id)] = (wrapper, node.lineno)
    return aliases


def _inner_call(
    ctx: Context, func: ast.expr, scope: Scope, aliases: dict[tuple[int, str], tuple[str, int]]
) -> str:
    wrapper = _inner_of_wrapper(ctx, func, scope)
    if not wrapper and isinstance(func, ast.Name):
        wrapper, line = aliases.get((id(scope), func.id), ("", 0))
        if func.lineno <= line:
            return ""
    return wrapper


def _check_module_forward(ctx: Context, reported: set[int]) -> Iterator[Finding]:
    script = ctx.script
    aliases = _aliases(ctx)
    for call in ctx.script.call_list:
        func = call.node.func
        if isinstance(func, ast.Attribute) and func.attr == "forward":
            func = func.value
        wrapper = _inner_call(ctx, func, call.scope, aliases)
        if (
            not wrapper
            or id(call.scope) in reported
            or _excused(ctx, call.node)
            or not _trains(ctx, call.scope)
        ):
            continue
        reported.add(id(call.scope))
        rebound = isinstance(func, ast.Name) and func.id == wrapper
        where = (
            f" (rebound to `{wrapper}.module` on line {aliases[(id(call.scope), wrapper)][1]})"
            if rebound
            else ""
        )
        yield ctx.finding(
            TRG056,
            call.node,
            f"this training forward calls `{script.text(call.node, 40)}`, the module inside the"
            f" `{wrapper}` wrapper{where}, not the wrapper: DDP's gradient hooks are armed by its own"
            " forward, so no gradient is synchronised and each rank trains its own copy; call the"
            " wrapper ([verify]: gradients become averaged across ranks, the run trains differently)",
        )
    yield from _check_module_methods(ctx, aliases, reported)


_HOUSEKEEPING = re.compile(
    r"(named_)?(parameters|buffers|modules|children)|(load_)?state_dict|train|eval|to|cuda|cpu|float|half"
    r"|bfloat16|zero_grad|requires_grad_|apply|(register|get|set)_\w+"
)


def _check_module_methods(
    ctx: Context, aliases: dict[tuple[int, str], tuple[str, int]], reported: set[int]
) -> Iterator[Finding]:
    """`unwrapped.decode(z)`, `W.module.compute_loss(batch)`: a method of the inner module given data
    in a training function that never calls the wrapper itself, so the loss-bearing forward can only
    be that method (or something the file does not show)."""
    script = ctx.script
    for call in script.call_list:
        func, node = call.node.func, call.node
        if (
            not isinstance(func, ast.Attribute)
            or func.attr == "forward"
            or _HOUSEKEEPING.fullmatch(func.attr)
        ):
            continue
        data = [*node.args, *(k.value for k in node.keywords)]
        if _NOT_TRAINING.search(func.attr.lower()) or all(isinstance(a, ast.Constant) for a in data):
            continue
        wrapper = _inner_call(ctx, func.value, call.scope, aliases)
        if not wrapper or id(call.scope) in reported or _excused(ctx, node):
            continue
        if not _trains(ctx, call.scope) or _calls_wrapper(ctx, wrapper, call.scope):
            continue
        reported.add(id(call.scope))
        yield ctx.finding(
            TRG056,
            node,
            f"the training loss comes from `{script.text(node, 40)}`, a method of the module inside the"
            f" `{wrapper}` wrapper, and this training step never calls `{wrapper}` itself: DDP's gradient"
            " hooks are armed by its own forward, so no gradient is synchronised and each rank trains its"
            f" own copy; compute the loss through `{wrapper}(...)`"
            " ([verify]: gradients become averaged across ranks, the run trains differently)",
        )


def _calls_wrapper(ctx: Context, wrapper: str, scope: Scope) -> bool:
    return any(
        c.scope is scope and dotted(c.node.func) in (wrapper, f"{wrapper}.forward")
        for c in ctx.script.call_list
    )


def check(ctx: Context) -> Iterator[Finding]:
    """Every finding of this module's rules on one script."""
    reported: set[int] = set()  # one finding per training function, whichever form it has
    yield from _check(ctx, reported)
    yield from _check_module_forward(ctx, reported)
