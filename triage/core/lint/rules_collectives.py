"""D21: a collective (or something that runs one inside) that only some ranks reach.

A collective completes only when every rank calls it, so one under `if rank == 0:` waits forever.
Certain collectives (`dist.barrier`, `all_reduce`, `accelerator.wait_for_everyone`, Lightning's
`trainer.save_checkpoint`, a DeepSpeed engine's `save_checkpoint`, an FSDP model's forward) are
errors; calls that communicate only in some setups (a DDP model's forward, `accelerator.save_state`,
a helper from another module named like a collective) are warnings; which calls those are is
`communication`'s to say. A helper of the same file called under the gate is followed, and the
helpers it calls, three calls deep. The rank-0 / other-ranks pair
(`if local_rank not in (-1, 0): barrier()` ... `if local_rank == 0: barrier()`) is matched and
not reported.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

from triage.core.lint.communication import Communication, communication, forward
from triage.core.lint.context import Context
from triage.core.lint.model import Finding, Rule
from triage.core.lint.patterns import enclosing_ifs
from triage.core.lint.ranks import Gate
from triage.core.lint.script import Call, FunctionNode, dotted

TRG021 = Rule(
    code="TRG021",
    entry="D21",
    severity="error",
    name="rank-conditional-collective",
    message="a collective is only reached on some ranks; every rank must call it",
    fix="call the collective on every rank and put only the side effect under the rank check",
    fact="lint.rank_conditional_collective",
    finds=(
        "A collective (`dist.barrier`, `all_reduce`, `all_gather`, `broadcast`, ...,"
        " `accelerator.wait_for_everyone`, `accelerator.gather`, Lightning's `trainer.save_checkpoint`,"
        " a DeepSpeed engine's `save_checkpoint`, Lightning Fabric's `barrier`/`all_reduce`/`all_gather`/"
        "`broadcast`, the forward of an FSDP model, the"
        " `torch.distributed.checkpoint` state-dict functions) inside `if rank == 0:`, its `else`,"
        " after `if rank != 0: return`, or in a `@rank_zero_only` function. It also finds a function"
        " of the same file that runs a collective, called under such a condition. Rank conditions are"
        " followed through names: `is_main = rank == 0`, `dist.get_rank() == 0`,"
        " `accelerator.is_main_process`, `trainer.is_global_zero`, `local_rank in (-1, 0)`."
    ),
    why=(
        "A collective is a meeting: it returns only when every rank in the group has called it. The"
        " ranks that skip the branch go on to the next collective (or the end of the epoch) while"
        " rank 0 waits inside this one, and the job hangs until the collective timeout kills it,"
        " 10 to 30 minutes later, with an error that names a different collective."
    ),
    example=(
        "import torch.distributed as dist\n\n"
        "dist.init_process_group('nccl')\n"
        "rank = dist.get_rank()\n"
        "if rank == 0:\n"
        "    save_checkpoint()\n"
        "    dist.barrier()\n"
    ),
    fixed=(
        "import torch.distributed as dist\n\n"
        "dist.init_process_group('nccl')\n"
        "rank = dist.get_rank()\n"
        "if rank == 0:\n"
        "    save_checkpoint()\n"
        "dist.barrier()  # every rank\n"
    ),
)

TRG036 = Rule(
    code="TRG036",
    entry="D21",
    severity="warning",
    name="rank-conditional-sync",
    message="a call that may communicate across ranks is only reached on some ranks",
    fix="run it on every rank, or call the unwrapped module (`model.module`) under the rank check",
    fact="lint.rank_conditional_sync",
    finds=(
        "Calls that run a collective in some setups, under a rank condition: the forward of a"
        " DDP-wrapped or Accelerate-prepared model (DDP broadcasts buffers in training mode), a"
        " DeepSpeed engine's forward (ZeRO-3 all-gathers parameters), `accelerator.save_state`,"
        " `accelerator.get_state_dict`, `accelerator.save_model`, an FSDP model's `state_dict()`,"
        " Lightning's `self.log(..., sync_dist=True)`, helpers imported from other modules named like"
        " collectives (`utils.barrier()`, `comm.synchronize()`, `reduce_dict`), and collectives given"
        " an explicit `group=` (the group may hold only these ranks)."
    ),
    why=(
        "Whether these calls communicate depends on the model (buffers, BatchNorm), the ZeRO stage or"
        " the state-dict type. When they do, only the gated ranks enter the collective and the job"
        " hangs exactly like a barrier under `if rank == 0:` (D21)."
    ),
    example=(
        "import torch.distributed as dist\n"
        "from torch.nn.parallel import DistributedDataParallel as DDP\n\n"
        "model = DDP(build_model(), device_ids=[local_rank])\n"
        "if dist.get_rank() == 0:\n"
        "    score = model(val_batch)\n"
    ),
    fixed=(
        "import torch.distributed as dist\n"
        "from torch.nn.parallel import DistributedDataParallel as DDP\n\n"
        "model = DDP(build_model(), device_ids=[local_rank])\n"
        "if dist.get_rank() == 0:\n"
        "    score = model.module(val_batch)  # the unwrapped model issues no collective\n"
    ),
)
RULES = (TRG021, TRG036)


@dataclass(frozen=True)
class _Candidate:
    comm: Communication
    gate: Gate
    at: ast.Call  # where to report: the collective, or the call of the helper that runs it
    via: str  # "" or "`helper()` calls barrier() (line 12) and "


def _helper_communications(
    ctx: Context,
    site: Call,
    helper: FunctionNode,
    given: dict[str, str | None] | None = None,
    depth: int = 0,
    decided: dict[str, bool] | None = None,
) -> Iterator[tuple[Communication, str]]:
    """Collectives a same-file helper runs on every call, seen from a call site: in its own body,
    or in the same-file helpers it calls in turn (up to three deep: `eval_accuracy(rm)` calls
    `_pair_rewards(rm, batch)`, which runs the DDP model's forward). `given`: the wrapper kinds the
    caller's own parameters hold, for the arguments that pass them on; `decided`: the tests the
    callers above have already settled (`self.pipe` in the `else` of `if self.pipe:`)."""
    params = [a.arg for a in helper.args.posonlyargs + helper.args.args]
    if params and params[0] in ("self", "cls"):
        params = params[1:]
    pairs = [
        *zip(params, site.node.args, strict=False),
        *((k.arg, k.value) for k in site.node.keywords if k.arg),
    ]
    passed = {p: _kind_passed(ctx, arg, site, given) for p, arg in pairs}
    arguments = _arguments(helper, site)
    known = {**(decided or {}), **_known_at(ctx, site, helper)}
    for inner in _calls_in(ctx, helper):
        if ctx.ranks.gate(inner.node) is not None:
            continue
        if _switched_off(ctx, inner.node, helper, arguments, known):
            continue
        found = communication(ctx, inner)
        if found is None and isinstance(inner.node.func, ast.Name) and passed.get(inner.node.func.id):
            found = forward(inner, passed[inner.node.func.id] or "")
        if found is not None:
            yield found, f"`{helper.name}()` calls {found.label} (line {inner.node.lineno}) and "
            continue
        nested = ctx.script.local_function(inner.node)
        if nested is not None and nested is not helper and depth < 2 and _expand(ctx):
            for deeper, via in _helper_communications(ctx, inner, nested, passed, depth + 1, known):
                yield deeper, f"`{helper.name}()` calls {via}"


_EXPANSIONS = 2000  # helpers of helpers followed per script: a generated file of 400 helpers
# calling 5 others each must not take minutes


def _expand(ctx: Context) -> bool:
    done = ctx.script.cache.get("collectives.expansions")
    count = done if isinstance(done, int) else 0
    ctx.script.cache["collectives.expansions"] = count + 1
    return count < _EXPANSIONS


def _calls_in(ctx: Context, scope: FunctionNode) -> list[Call]:
    """The calls whose innermost function is `scope` (indexed once per script)."""
    cached = ctx.script.cache.get("collectives.calls_by_scope")
    if isinstance(cached, dict):
        index: dict[int, list[Call]] = cached
    else:
        index = {}
        for call in ctx.script.call_list:
            index.setdefault(id(call.scope), []).append(call)
        ctx.script.cache["collectives.calls_by_scope"] = index
    return index.get(id(scope), [])


def _kind_passed(ctx: Context, arg: ast.expr, site: Call, given: dict[str, str | None] | None) -> str | None:
    """The wrapper kind an argument carries: its own, or that of the caller's parameter it names."""
    kind = ctx.wrappers.kind(arg, site.scope)
    if kind is None and given and isinstance(arg, ast.Name):
        return given.get(arg.id)
    return kind


def _arguments(helper: FunctionNode, site: Call) -> dict[str, ast.expr]:
    """What each parameter of `helper` gets at this call: the argument, else its default."""
    params = helper.args.posonlyargs + helper.args.args
    values: dict[str, ast.expr] = {}
    for param, default in zip(reversed(params), reversed(helper.args.defaults), strict=False):
        values[param.arg] = default
    for param, maybe in zip(helper.args.kwonlyargs, helper.args.kw_defaults, strict=True):
        if maybe is not None:
            values[param.arg] = maybe
    names = [a.arg for a in params]
    if names and names[0] in ("self", "cls") and isinstance(site.node.func, ast.Attribute):
        names = names[1:]
    values.update(dict(zip(names, site.node.args, strict=False)))
    values.update({k.arg: k.value for k in site.node.keywords if k.arg})
    return values


def _tests(ctx: Context, node: ast.AST, stop: ast.AST | None = None) -> Iterator[tuple[ast.expr, bool]]:
    """Each condition `node` runs under (innermost first) and the value it has there: in the body
    of `if not x:` or the `else` of `if x:`, `x` is False."""
    for test_if in enclosing_ifs(ctx.script, node, stop=stop):
        in_body = any(node in ast.walk(stmt) for stmt in test_if.body)
        test, value = test_if.test, in_body
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            test, value = test.operand, not in_body
        yield test, value


def _known_at(ctx: Context, site: Call, helper: FunctionNode) -> dict[str, bool]:
    """Attribute tests the call site has already decided (`self.args.is_pipe_parallel` in the
    `else` of `if self.args.is_pipe_parallel:`), where they mean the same object in the helper:
    `self.` in a method of the same class, or any other attribute chain."""
    same_class = ctx.script.enclosing_class(site.node) is ctx.script.enclosing_class(helper)
    known: dict[str, bool] = {}
    for test, value in _tests(ctx, site.node):
        text = dotted(test) if isinstance(test, ast.Attribute) else ""
        if text and (same_class or not text.startswith("self.")):
            known.setdefault(text, value)
    return known


def _switched_off(
    ctx: Context, node: ast.AST, helper: FunctionNode, arguments: dict[str, ast.expr], known: dict[str, bool]
) -> bool:
    """`if synchronize: barrier()` in a helper called with `synchronize=False`, or
    `if self.pipe: all_reduce()` in a helper called in the `else` of `if self.pipe:`: not run there."""
    for test, wanted in _tests(ctx, node, stop=helper):
        value = arguments.get(test.id) if isinstance(test, ast.Name) else None
        if isinstance(value, ast.Constant) and bool(value.value) is not wanted:
            return True
        if isinstance(test, ast.Attribute) and known.get(dotted(test), wanted) is not wanted:
            return True
    return False


def _candidates(ctx: Context) -> Iterator[_Candidate]:
    for call in ctx.script.call_list:
        gate = ctx.ranks.gate(call.node)
        if gate is None or not ctx.ranks.per_rank(call.node):
            continue
        comm = communication(ctx, call)
        if comm is not None:
            if not _members_only(gate, comm.node):
                yield _Candidate(comm, gate, call.node, "")
            continue
        helper = ctx.script.local_function(call.node)
        if helper is not None and helper is not ctx.script.scope_of(call.node):
            for found, via in _helper_communications(ctx, call, helper):
                if not _members_only(gate, found.node):
                    yield _Candidate(found, gate, call.node, via)


def _members_only(gate: Gate, collective: ast.Call) -> bool:
    """`if rank in ranks: all_reduce(t, group=group_of_those_ranks)` (or a helper that does it, under
    `if is_member(group):`): the members of a subgroup, as it should be."""
    return gate.side == "other" and any(k.arg in ("group", "process_group") for k in collective.keywords)


def _other_arm_calls(ctx: Context, c: _Candidate) -> bool:
    """Whether the other arm of the gating `if` (its `else`, an `elif` chain included, or its body
    for a call in the `else`) makes the same call: `if rank == dst: gather(x, out) else:
    gather(x, None)` reaches it on every rank."""
    child: ast.AST = c.at
    for parent in ctx.script.ancestors(c.at):
        if isinstance(parent, FunctionNode | ast.Lambda):
            return False
        if isinstance(parent, ast.If) and parent.lineno == c.gate.line:
            other = parent.orelse if child in parent.body else parent.body
            nodes = {id(n) for stmt in other for n in ast.walk(stmt) if isinstance(n, ast.Call)}
            same = dotted(c.at.func)
            return any(
                id(call.node) in nodes
                and (
                    (c.via and dotted(call.node.func) == same)  # the same helper
                    or (c.via and same in _handed(call.node))  # `optimizer.step(closure)`
                    or ((found := communication(ctx, call)) is not None and found.name == c.comm.name)
                )
                for call in ctx.script.call_list
            )
        child = parent
    return False


def _handed(call: ast.Call) -> set[str]:
    """The names a call hands over as arguments: a closure an optimizer's step() runs."""
    return {a.id for a in (*call.args, *(k.value for k in call.keywords)) if isinstance(a, ast.Name)}


def _signal(ctx: Context, c: _Candidate) -> tuple[str, str]:
    """The collective and the object it moves: rank 0's `broadcast(signal, src=0)` in one function
    meets the others' `broadcast(signal, src=0)` in another (MACE's LBFGS protocol)."""
    first = c.comm.node.args[0] if c.comm.node.args else None
    return c.comm.name, dotted(first) if first is not None and not c.via else ""


def check(ctx: Context) -> Iterator[Finding]:
    """Every finding of this module's rules on one script."""
    candidates = list(_candidates(ctx))
    # Rank 0 and the other ranks each reaching the same collective in one function is the
    # "others wait, rank 0 works, rank 0 releases" pattern: every rank calls it once.
    # So is `if rank == dst: gather(..., out) else: gather(..., None)`: both arms of one `if`.
    # So is `if rank not in ranks: barrier(); return` ... `barrier()`: both arms of one test.
    sides: dict[tuple[int, str], set[str]] = {}
    arms: dict[tuple[int, str], set[tuple[int, bool]]] = {}
    for c in candidates:
        key = (id(ctx.script.scope_of(c.at)), c.comm.name)
        sides.setdefault(key, set()).add(c.gate.side)
        arms.setdefault(key, set()).add((c.gate.line, c.gate.where.startswith("inside")))
    signals: dict[tuple[str, str], set[str]] = {}
    for c in candidates:
        if _signal(ctx, c)[1]:
            signals.setdefault(_signal(ctx, c), set()).add(c.gate.side)
    for c in candidates:
        key = (id(ctx.script.scope_of(c.at)), c.comm.name)
        if {"zero", "nonzero"} <= sides[key] or (c.gate.line, not c.gate.where.startswith("inside")) in arms[
            key
        ]:
            continue
        if _signal(ctx, c)[1] and {"zero", "nonzero"} <= signals[_signal(ctx, c)]:
            continue
        if _other_arm_calls(ctx, c):
            continue
        rule = TRG021 if c.comm.certain else TRG036
        tail = (
            "every rank must call it" if c.comm.certain else "if it communicates, the other ranks never join"
        )
        if c.via:
            message = f"{c.via}is only reached on {c.gate.who} ({c.gate.where}); {tail}"
        else:
            message = f"{c.comm.label} is only reached on {c.gate.who} ({c.gate.where}); {tail}"
        yield ctx.finding(rule, c.at, message)
