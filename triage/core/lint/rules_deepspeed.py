"""D18: the DeepSpeed engine (and Accelerate) own backward and the accumulation cadence.

TRG018: `loss.backward()` in a function that trains a DeepSpeed engine and never calls
        `engine.backward(loss)`.
TRG034: `loss.backward()` in an Accelerate training function that never calls `accelerator.backward`.
TRG035: `engine.step()` skipped on some micro-batches, or the loss divided by the accumulation steps
        before `engine.backward` (DeepSpeed divides already).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from triage.core.lint.context import Context
from triage.core.lint.model import Finding, Rule
from triage.core.lint.patterns import accumulation_like, enclosing_ifs, has_modulo, is_backward
from triage.core.lint.script import Call, Scope, dotted

TRG018 = Rule(
    code="TRG018",
    entry="D18",
    severity="error",
    name="backward-bypasses-deepspeed",
    message="loss.backward() bypasses the DeepSpeed engine; call engine.backward(loss)",
    fix="replace `loss.backward()` with `model_engine.backward(loss)` and call `model_engine.step()` every micro-batch",
    fact="lint.deepspeed_bare_backward",
    finds=(
        "A function that trains a DeepSpeed engine (the first value `deepspeed.initialize` returns:"
        " it calls the engine or `engine.step()`) and runs `loss.backward()` without ever calling"
        " `engine.backward(...)`."
    ),
    why=(
        "`engine.backward(loss)` scales the loss for fp16, divides it by the accumulation steps and"
        " drives ZeRO's gradient reduction and partitioning. A bare `loss.backward()` skips all of it:"
        " fp16 gradients can underflow, the accumulation scale is wrong, and depending on the ZeRO"
        " stage DeepSpeed asserts or trains silently wrong."
    ),
    example=(
        "import deepspeed\n\n"
        "engine, optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)\n"
        "for batch in loader:\n"
        "    loss = engine(batch).mean()\n"
        "    loss.backward()\n"
        "    engine.step()\n"
    ),
    fixed=(
        "import deepspeed\n\n"
        "engine, optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)\n"
        "for batch in loader:\n"
        "    loss = engine(batch).mean()\n"
        "    engine.backward(loss)\n"
        "    engine.step()\n"
    ),
)
TRG034 = Rule(
    code="TRG034",
    entry="D18",
    severity="warning",
    name="backward-bypasses-accelerate",
    message="loss.backward() in an Accelerate loop skips accelerator.backward (loss scaling, DeepSpeed, accumulation)",
    fix="call `accelerator.backward(loss)`",
    fact="lint.deepspeed_bare_backward",
    finds=(
        "`loss.backward()` in a function that uses an `Accelerator` (or a model it prepared) and never"
        " calls `accelerator.backward(...)`."
    ),
    why=(
        "`accelerator.backward` applies the fp16 gradient scaler, divides by the accumulation steps"
        " under `accumulate()`, and routes to the DeepSpeed engine when the config uses DeepSpeed. With"
        " `loss.backward()` the same script trains correctly under one config and wrongly under another."
    ),
    example=(
        "from accelerate import Accelerator\n\n"
        "accelerator = Accelerator()\n"
        "model, optimizer, loader = accelerator.prepare(model, optimizer, loader)\n"
        "for batch in loader:\n"
        "    loss = model(batch).mean()\n"
        "    loss.backward()\n"
        "    optimizer.step()\n"
    ),
    fixed=(
        "from accelerate import Accelerator\n\n"
        "accelerator = Accelerator()\n"
        "model, optimizer, loader = accelerator.prepare(model, optimizer, loader)\n"
        "for batch in loader:\n"
        "    loss = model(batch).mean()\n"
        "    accelerator.backward(loss)\n"
        "    optimizer.step()\n"
    ),
)
TRG035 = Rule(
    code="TRG035",
    entry="D18",
    severity="warning",
    name="deepspeed-double-accumulation",
    message="accumulation is handled twice: DeepSpeed already accumulates inside the engine",
    fix="call `engine.step()` after every micro-batch and pass the undivided loss to `engine.backward`",
    fact="lint.deepspeed_bare_backward",
    finds=(
        "`engine.step()` under an `if step % accum == 0:`, or the loss divided by the accumulation steps"
        " before `engine.backward(loss)`, for an engine from `deepspeed.initialize`."
    ),
    why=(
        "The engine counts micro-batches itself: `engine.step()` must run after every one and updates"
        " the weights only at the boundary of `gradient_accumulation_steps`, and `engine.backward`"
        " divides the loss by that number. Gating the step makes an update cover k x GAS micro-batches;"
        " dividing the loss again shrinks every gradient by the same factor."
    ),
    example=(
        "import deepspeed\n\n"
        "engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)\n"
        "for i, batch in enumerate(loader):\n"
        "    engine.backward(engine(batch).mean())\n"
        "    if (i + 1) % accum == 0:\n"
        "        engine.step()\n"
    ),
    fixed=(
        "import deepspeed\n\n"
        "engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)\n"
        "for i, batch in enumerate(loader):\n"
        "    engine.backward(engine(batch).mean())\n"
        "    engine.step()\n"
    ),
)
RULES = (TRG018, TRG034, TRG035)


def _by_scope(ctx: Context) -> dict[int, list[Call]]:
    found: dict[int, list[Call]] = {}
    for call in ctx.script.call_list:
        found.setdefault(id(call.scope), []).append(call)
    return found


def _engine_calls(ctx: Context, calls: list[Call], scope: Scope) -> tuple[list[Call], bool]:
    """The calls in a function that use a DeepSpeed engine, and whether one is engine.backward."""
    used, backward = [], False
    for call in calls:
        if ctx.wrappers.kind(call.node.func, scope) == "deepspeed":
            used.append(call)
        elif call.receiver is not None and ctx.wrappers.kind(call.receiver, scope) == "deepspeed":
            used.append(call)
            backward = backward or call.tail == "backward"
    return used, backward


def _check_engine(ctx: Context, calls: list[Call], scope: Scope) -> Iterator[Finding]:
    used, engine_backward = _engine_calls(ctx, calls, scope)
    if not used:
        return
    accelerate_backward = any(c.tail == "backward" and ctx.wrappers.is_accelerator(c) for c in calls)
    if not engine_backward and not accelerate_backward:
        for call in calls:
            if (
                is_backward(call)
                and ctx.wrappers.kind(call.receiver, scope) != "deepspeed"
                and not ctx.wrappers.is_accelerator(call)
                and ctx.script.local_function(call.node) is None  # `self.backward(loss)`: a method here
            ):
                yield ctx.finding(
                    TRG018,
                    call.node,
                    f"`{ctx.script.text(call.node, 40)}` bypasses the DeepSpeed engine used in this function: no loss"
                    " scaling, no accumulation scale, no ZeRO gradient bookkeeping; call engine.backward(loss)",
                )
                break
    yield from _double_accumulation(ctx, used, calls)


def _double_accumulation(ctx: Context, used: list[Call], calls: list[Call]) -> Iterator[Finding]:
    for call in used:
        if call.tail == "step" and not call.node.args:
            gates = [
                i
                for i in enclosing_ifs(ctx.script, call.node)
                if (has_modulo(i.test) or accumulation_like(ctx.script.text(i.test, 200)))
                and not _steps_in_both(ctx, i, dotted(call.node.func))
            ]
            if gates:
                yield ctx.finding(
                    TRG035,
                    call.node,
                    f"{dotted(call.node.func)}() only runs when `{ctx.script.text(gates[0].test, 40)}`: the engine"
                    " already steps at its gradient_accumulation_steps boundary, so an update now spans both counts",
                )
        elif call.tail == "backward" and call.node.args:
            loss = call.node.args[0]
            divided = (
                isinstance(loss, ast.BinOp)
                and isinstance(loss.op, ast.Div)
                and accumulation_like(ctx.script.text(loss.right, 80))
            )
            if not divided and isinstance(loss, ast.Name):
                divided = _divided_before(ctx, loss.id, call)
            if divided:
                yield ctx.finding(
                    TRG035,
                    call.node,
                    "the loss is divided by the accumulation steps before engine.backward(), which divides by"
                    " gradient_accumulation_steps again: every gradient is that many times too small",
                )


def _steps_in_both(ctx: Context, branch: ast.If, step: str) -> bool:
    """`if boundary: ... engine.step() else: engine.step()`: every micro-batch steps after all."""

    def steps(body: list[ast.stmt]) -> bool:
        return any(
            isinstance(n, ast.Call) and dotted(n.func) == step for stmt in body for n in ast.walk(stmt)
        )

    return steps(branch.body) and steps(branch.orelse)


def _divided_before(ctx: Context, name: str, at: Call) -> bool:
    for node in ast.walk(at.scope):
        if getattr(node, "lineno", at.node.lineno) >= at.node.lineno:
            continue
        if (
            isinstance(node, ast.AugAssign)
            and isinstance(node.op, ast.Div)
            and dotted(node.target) == name
            and accumulation_like(ctx.script.text(node.value, 80))
        ):
            return True
        if isinstance(node, ast.Assign) and any(dotted(t) == name for t in node.targets):
            value = node.value
            if (
                isinstance(value, ast.BinOp)
                and isinstance(value.op, ast.Div)
                and accumulation_like(ctx.script.text(value.right, 80))
            ):
                return True
    return False


def _check_accelerate(ctx: Context, calls: list[Call], scope: Scope) -> Iterator[Finding]:
    if "accelerate" not in ctx.script.frameworks or ctx.wrappers.of_kind("deepspeed"):
        return
    uses_accelerate = any(
        ctx.wrappers.is_accelerator(c) or ctx.wrappers.kind(c.node.func, scope) == "prepared" for c in calls
    )
    if not uses_accelerate or any(c.tail == "backward" and ctx.wrappers.is_accelerator(c) for c in calls):
        return
    for call in calls:
        if is_backward(call) and not call.node.args:
            yield ctx.finding(
                TRG034,
                call.node,
                f"`{ctx.script.text(call.node, 40)}` in an Accelerate loop skips accelerator.backward(): no fp16 loss"
                " scaling, no accumulation scale, and the wrong call once the config uses DeepSpeed",
            )
            return


def check(ctx: Context) -> Iterator[Finding]:
    """Every finding of this module's rules on one script."""
    if not ({"deepspeed", "accelerate"} & ctx.script.frameworks):
        return
    for calls in _by_scope(ctx).values():
        scope = calls[0].scope
        yield from _check_engine(ctx, calls, scope)
        yield from _check_accelerate(ctx, calls, scope)
