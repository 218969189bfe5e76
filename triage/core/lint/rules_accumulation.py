"""E12: gradient accumulation under DDP and `no_sync`.

TRG052: accumulation (the optimizer steps every N micro-batches) with no `no_sync` anywhere: an
        all-reduce on every micro-batch.
TRG053: the optimizer steps inside `with model.no_sync():` right after a backward there: the step
        uses gradients that were never all-reduced.
TRG054: `no_sync` around backward only, with the forward outside: DDP still all-reduces.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from triage.core.lint.context import Context
from triage.core.lint.model import Finding, Rule
from triage.core.lint.patterns import (
    accumulation_like,
    enclosing_ifs,
    has_modulo,
    is_backward,
    is_optimizer_step,
    loops_of,
)
from triage.core.lint.script import Call, dotted

TRG052 = Rule(
    code="TRG052",
    entry="E12",
    severity="info",
    name="accumulation-without-no-sync",
    message="gradient accumulation under DDP without no_sync all-reduces on every micro-batch",
    fix="run the forward and backward of every micro-batch but the last inside `with model.no_sync():`",
    fact="lint.accumulation_sync",
    finds=(
        "A DDP script whose loop steps the optimizer every N micro-batches (`if (i + 1) % accum == 0:"
        " optimizer.step()`, or backward inside `for _ in range(accumulation_steps)`), when nothing in"
        " the file uses `no_sync` or `require_backward_grad_sync`."
    ),
    why=(
        "DDP all-reduces gradients during every backward in sync mode. Accumulating over N micro-batches"
        " without `no_sync` sends N times the traffic for the same update, so accumulation buys no"
        " speed on slow links. The result is correct; the time is wasted."
    ),
    example=(
        "from torch.nn.parallel import DistributedDataParallel as DDP\n\n"
        "model = DDP(model, device_ids=[local_rank])\n"
        "for i, batch in enumerate(loader):\n"
        "    loss = model(batch).mean() / accum\n"
        "    loss.backward()\n"
        "    if (i + 1) % accum == 0:\n"
        "        optimizer.step()\n"
        "        optimizer.zero_grad()\n"
    ),
    fixed=(
        "import contextlib\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n\n"
        "model = DDP(model, device_ids=[local_rank])\n"
        "for i, batch in enumerate(loader):\n"
        "    last = (i + 1) % accum == 0\n"
        "    with contextlib.nullcontext() if last else model.no_sync():\n"
        "        loss = model(batch).mean() / accum\n"
        "        loss.backward()\n"
        "    if last:\n"
        "        optimizer.step()\n"
        "        optimizer.zero_grad()\n"
    ),
)
TRG053 = Rule(
    code="TRG053",
    entry="E12",
    severity="error",
    name="step-inside-no-sync",
    message="the optimizer steps inside no_sync, on gradients that were never all-reduced",
    fix="leave the last micro-batch of each step outside `no_sync`, and step after it",
    fact="lint.accumulation_sync",
    finds="`optimizer.step()` inside `with model.no_sync():` after a `backward()` in the same block.",
    why=(
        "Inside `no_sync` DDP skips the all-reduce. A step taken right after a backward there uses each"
        " rank's local gradient only: the replicas drift apart and the run trains like N independent"
        " models on 1/N of the data each, with no error anywhere."
    ),
    example=(
        "from torch.nn.parallel import DistributedDataParallel as DDP\n\n"
        "model = DDP(model, device_ids=[local_rank])\n"
        "for batch in loader:\n"
        "    with model.no_sync():\n"
        "        model(batch).mean().backward()\n"
        "        optimizer.step()\n"
    ),
    fixed=(
        "from torch.nn.parallel import DistributedDataParallel as DDP\n\n"
        "model = DDP(model, device_ids=[local_rank])\n"
        "for batch in loader:\n"
        "    model(batch).mean().backward()\n"
        "    optimizer.step()\n"
    ),
)
TRG054 = Rule(
    code="TRG054",
    entry="E12",
    severity="warning",
    name="no-sync-around-backward-only",
    message="no_sync covers the backward but not the forward, so DDP still all-reduces",
    fix="put the forward of the micro-batch inside the `no_sync` block too",
    fact="lint.accumulation_sync",
    finds="`with model.no_sync():` whose block calls `backward()` but never runs the model.",
    why=(
        "DDP decides whether to synchronise when the forward runs (it prepares the reducer there). A"
        " forward outside `no_sync` followed by a backward inside it still all-reduces: the context"
        " does nothing, and the accumulation costs full communication."
    ),
    example=(
        "from torch.nn.parallel import DistributedDataParallel as DDP\n\n"
        "model = DDP(model, device_ids=[local_rank])\n"
        "loss = model(batch).mean()\n"
        "with model.no_sync():\n"
        "    loss.backward()\n"
    ),
    fixed=(
        "from torch.nn.parallel import DistributedDataParallel as DDP\n\n"
        "model = DDP(model, device_ids=[local_rank])\n"
        "with model.no_sync():\n"
        "    loss = model(batch).mean()\n"
        "    loss.backward()\n"
    ),
)
RULES = (TRG052, TRG053, TRG054)


def _no_sync_blocks(ctx: Context) -> Iterator[tuple[ast.With, ast.expr]]:
    for node in [*ctx.script.of_type(ast.With), *ctx.script.of_type(ast.AsyncWith)]:
        if isinstance(node, ast.With | ast.AsyncWith):
            for item in node.items:
                model = _no_sync_model(ctx, node, item.context_expr)
                if model is not None:
                    yield node, model  # type: ignore[misc]


def _no_sync_model(ctx: Context, block: ast.AST, expr: ast.expr) -> ast.expr | None:
    """The model whose `no_sync` this `with` item enters: `model.no_sync()`, or a manager chosen
    before it in the same function (`ctx = model.no_sync() if not last else nullcontext()` then
    `with ctx:`, or `ctx = model.no_sync if ... else nullcontext` then `with ctx():`)."""
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "no_sync":
        return expr.func.value
    name = expr.func if isinstance(expr, ast.Call) else expr
    if not isinstance(name, ast.Name):
        return None
    scope = ctx.script.scope_of(block)
    for assign in ast.walk(scope):
        if not (
            isinstance(assign, ast.Assign)
            and ctx.script.scope_of(assign) is scope
            and any(isinstance(t, ast.Name) and t.id == name.id for t in assign.targets)
        ):
            continue
        for inner in ast.walk(assign.value):
            if isinstance(inner, ast.Attribute) and inner.attr == "no_sync":
                return inner.value
    return None


def _calls_in(ctx: Context, block: ast.AST) -> list[Call]:
    inside = {id(n) for n in ast.walk(block) if isinstance(n, ast.Call)}
    return [c for c in ctx.script.call_list if id(c.node) in inside]


def _check_no_sync_blocks(ctx: Context) -> Iterator[Finding]:
    reported: set[int] = set()  # one finding per block, however many models it holds in no_sync
    for block, model in _no_sync_blocks(ctx):
        if id(block) in reported:
            continue
        calls = _calls_in(ctx, block)
        backwards = [c for c in calls if is_backward(c)]
        if not backwards:
            continue
        after = (backwards[0].node.lineno, backwards[0].node.col_offset)
        steps = [c for c in calls if is_optimizer_step(c) and (c.node.lineno, c.node.col_offset) > after]
        if any(c.tail == "all_reduce" and (c.node.lineno, c.node.col_offset) > after for c in calls):
            steps = []  # the gradients are all-reduced by hand before the step (fairscale's tests)
        model_text = dotted(model)
        if steps:
            reported.add(id(block))
            yield ctx.finding(
                TRG053,
                steps[0].node,
                f"{ctx.script.text(steps[0].node.func, 30)}() runs inside `with {model_text}.no_sync():` after a backward"
                " there: it steps on gradients that were never all-reduced, and the replicas drift apart",
            )
        uses = [
            n
            for stmt in block.body
            for n in ast.walk(stmt)
            if isinstance(n, ast.Name | ast.Attribute) and dotted(n) == model_text
        ]
        # A function of this file called in the block may run the forward without naming the model
        # (OLMo's `self.train_micro_batch(micro_batch)`, parler-tts' `train_step(batch, ...)`).
        helpers = [c for c in calls if ctx.script.local_function(c.node) is not None]
        if model_text and not uses and not helpers:
            reported.add(id(block))
            yield ctx.finding(
                TRG054,
                block,
                f"`with {model_text}.no_sync():` holds the backward but not the forward of `{model_text}`: DDP decided"
                " to synchronise when the forward ran, so this backward still all-reduces",
            )


def _check_missing_no_sync(ctx: Context) -> Iterator[Finding]:
    if not ctx.wrappers.sites.get("ddp"):
        return
    if ctx.script.mentions("no_sync", "require_backward_grad_sync"):
        return
    for call in ctx.script.call_list:
        if not is_backward(call):
            continue
        loops = loops_of(ctx.script, call.node)
        if not loops:
            continue
        inner = loops[0]
        accumulating = (
            isinstance(inner, ast.For)
            and isinstance(inner.iter, ast.Call)
            and accumulation_like(ctx.script.text(inner.iter, 200))
        )
        if not accumulating:
            steps = [c for c in _calls_in(ctx, inner) if is_optimizer_step(c)]
            backward_ifs = set(map(id, enclosing_ifs(ctx.script, call.node, inner)))
            accumulating = any(
                any(
                    has_modulo(i.test) and id(i) not in backward_ifs
                    for i in enclosing_ifs(ctx.script, s.node, inner)
                )
                for s in steps
            )
        if accumulating:
            yield ctx.finding(
                TRG052,
                call.node,
                "gradients are accumulated over several micro-batches, but every backward under DDP all-reduces:"
                " run the micro-batches before the last inside `with model.no_sync():`",
            )
            return


Phase = tuple[str, str, int]  # (counter, modulus, offset): the micro-batches with counter % modulus == offset


def _phase(test: ast.expr, equal: bool) -> Phase | None:
    """The micro-batches `(i + c) % K == r` (or `!=`, when `equal` is false) picks, as i = r - c (mod K);
    the counter and the modulus are named by their last part (`self.accum_grad` is `accum_grad`)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and len(test.comparators) == 1):
        return None
    if not isinstance(test.ops[0], ast.Eq if equal else ast.NotEq):
        return None
    mod, rest = test.left, test.comparators[0]
    if not (isinstance(mod, ast.BinOp) and isinstance(mod.op, ast.Mod)):
        return None
    if not (isinstance(rest, ast.Constant) and isinstance(rest.value, int)):
        return None
    counter, offset = mod.left, 0
    if isinstance(counter, ast.BinOp) and isinstance(counter.op, ast.Add):
        added = counter.right
        if not (isinstance(added, ast.Constant) and isinstance(added.value, int)):
            return None
        counter, offset = counter.left, added.value
    names = dotted(counter).split("."), dotted(mod.right).split(".")
    if not all(names[0]) or not all(names[1]):
        return None
    return names[0][-1], names[1][-1], rest.value - offset


def _sync_phase(ctx: Context) -> Phase | None:
    """The one micro-batch a `model.no_sync if (i % K != 0) else nullcontext` choice leaves synchronised."""
    for node in ctx.script.of_type(ast.IfExp):
        if not isinstance(node, ast.IfExp):
            continue
        arms = [
            "no_sync" in {n.attr for n in ast.walk(a) if isinstance(n, ast.Attribute)}
            for a in (node.body, node.orelse)
        ]
        if arms == [True, False]:
            return _phase(node.test, equal=False)
        if arms == [False, True]:
            return _phase(node.test, equal=True)
    return None


def _check_step_phase(ctx: Context) -> Iterator[Finding]:
    """TRG053 across functions: the optimizer steps on another micro-batch than the one no_sync spares."""
    synced = _sync_phase(ctx)
    if synced is None:
        return
    for call in ctx.script.call_list:
        if not is_optimizer_step(call):
            continue
        for guard in enclosing_ifs(ctx.script, call.node):
            tests = (
                guard.test.values
                if isinstance(guard.test, ast.BoolOp) and isinstance(guard.test.op, ast.And)
                else [guard.test]
            )
            for test in tests:
                stepped = _phase(test, equal=True)
                if stepped is not None and stepped[:2] == synced[:2] and stepped[2] != synced[2]:
                    counter, modulus = synced[:2]
                    step, sync = (
                        f"{counter} {'-+'[k <= 0]} {abs(k)}" if k else counter
                        for k in (stepped[2], synced[2])
                    )
                    yield ctx.finding(
                        TRG053,
                        call.node,
                        f"{ctx.script.text(call.node.func, 30)}() steps when {step} is a multiple of"
                        f" {modulus}, but no_sync is left off only when {sync} is: the micro-batch the"
                        " step follows ran inside no_sync, so it steps on gradients that were not all-reduced",
                    )
                    return


def check(ctx: Context) -> Iterator[Finding]:
    """Every finding of this module's rules on one script."""
    yield from _check_no_sync_blocks(ctx)
    yield from _check_step_phase(ctx)
    yield from _check_missing_no_sync(ctx)
