"""Which code of a file this file says runs per rank: its entry point, and what that reaches.

A module with no entry point of its own (no `__main__` block, no work at module level) is a library:
its functions run when other files call them, on ranks this file cannot see. What such a file does
say is limited to the functions tied to its own process-group set-up (the function that calls
`init_process_group`, as a snippet's `def main():` does, the functions that call it, and what those
call), the functions that read the rank themselves (`def train(..., rank):`), and the methods of
a class that gates some of its own methods to the main process (`@main_process_only`): such a class
is run by every rank, so its other methods are too.
A `utils.py` that holds `init_distributed_mode()` beside a `TensorboardLogger` class says nothing
about the logger, which `main.py` creates under `if rank == 0:`.
"""

from __future__ import annotations

import ast

from triage.core.lint.context import Context
from triage.core.lint.rank_terms import main_decorator
from triage.core.lint.script import FunctionNode, dotted

LAUNCHES = frozenset(
    {"spawn", "start_processes", "Process", "notebook_launcher", "launch", "elastic_launch", "debug_launcher"}
)
SETUP_TAILS = frozenset(
    {
        "init_process_group",
        "init_distributed",
        "initialize",
        "Accelerator",
        "Fabric",
        "Trainer",
        "spawn",
        "start_processes",
        "DistributedDataParallel",
        "DDP",
        "FullyShardedDataParallel",
        "FSDP",
        "fully_shard",
    }
)


def anchored(ctx: Context, node: ast.AST) -> bool:
    """Whether this file says on which ranks the function holding `node` runs: code at module
    level, any function of a file with an entry point of its own, and in a library module the
    functions reached from the module's top level or tied to its process-group set-up. A function
    handed to another call (a hook) runs where that call runs it: not anchored."""
    outer = _owners(ctx, node)
    if outer and outer[0] in callbacks(ctx):
        return False
    return (
        has_entry(ctx)
        or reached(ctx, node)
        or _reads_rank(ctx, node)
        or _in_gated_class(ctx, node)
        or _called_ungated_by_rank_reader(ctx, node)
    )


def reached(ctx: Context, node: ast.AST) -> bool:
    """Whether `node` is at module level, or in a function reached from there or tied to the
    process-group set-up of this file."""
    outer = _owners(ctx, node)
    return not outer or any(name in _reached(ctx) for name in outer)


def _reads_rank(ctx: Context, node: ast.AST) -> bool:
    """Whether the function holding `node` reads the rank itself (`def train(..., rank):` testing
    `if rank == 0:`): it says it runs on every rank, whoever calls it."""
    for scope in ctx.script.ancestors(node):
        if not isinstance(scope, FunctionNode):
            continue
        key = f"reach.reads_rank.{id(scope)}"
        cached = ctx.script.cache.get(key)
        if not isinstance(cached, bool):
            params = {a.arg for a in (*scope.args.posonlyargs, *scope.args.args, *scope.args.kwonlyargs)}
            cached = any(  # a rank it is handed, or its object's (`self.global_rank`)
                (
                    (isinstance(inner, ast.Name) and inner.id in params)
                    or (isinstance(inner, ast.Attribute) and dotted(inner).startswith("self."))
                )
                and ctx.ranks.rank_kind(inner, scope) is not None
                for inner in ast.walk(scope)
            )
            ctx.script.cache[key] = cached
        if cached:
            return True
    return False


def _called_ungated_by_rank_reader(ctx: Context, node: ast.AST) -> bool:
    """Whether the function holding `node` is called, under no rank condition, from a function that
    reads the rank itself (xla's `_save` calls `self._delete_chkpt_at_step(step)` before its own
    `if dist.get_rank(self.pg) == 0:`): it runs on every rank that its caller runs on."""
    function = ctx.script.enclosing_function(node)
    if function is None or _picks_its_own_process(function):
        return False
    for c in ctx.script.call_list:
        local = ctx.script.local_function(c.node)
        if (
            local is function
            and ctx.script.scope_of(c.node) is not function
            and ctx.ranks.effective_gate(c.node) is None
            and _tests_rank(ctx, ctx.script.scope_of(c.node))
        ):
            return True
    return False


_PROCESS_WORDS = ("rank", "main", "master", "replica")


def _picks_its_own_process(function: FunctionNode) -> bool:
    """A function with a process test of its own, even one this file cannot read (`if dp_id == 0
    and stage_id == 0:`, `if pending["is_main"]:`, `if is_main_replica(...)`): its own gates say
    where its work runs, not its caller's ranks."""
    for outer in ast.walk(function):
        if not isinstance(outer, ast.If | ast.IfExp):
            continue
        for inner in ast.walk(outer.test):
            if (  # not a cadence (`if i % print_every == 0:`)
                isinstance(inner, ast.Compare)
                and not (isinstance(inner.left, ast.BinOp) and isinstance(inner.left.op, ast.Mod))
                and any(isinstance(c, ast.Constant) and c.value == 0 for c in inner.comparators)
            ):
                return True
            word = (
                inner.value
                if isinstance(inner, ast.Constant) and isinstance(inner.value, str)
                else dotted(inner)
                if isinstance(inner, ast.Name | ast.Attribute)
                else ""
            )
            if any(w in word.lower() for w in _PROCESS_WORDS):
                return True
    return False


def _tests_rank(ctx: Context, scope: ast.AST) -> bool:
    """Whether a function tests the rank in a condition of its own (`if dist.get_rank() == 0:`)."""
    return isinstance(scope, FunctionNode) and any(
        isinstance(inner, ast.If) and ctx.ranks.side(inner.test, scope) is not None
        for inner in ast.walk(scope)
    )


def _in_gated_class(ctx: Context, node: ast.AST) -> bool:
    """Whether `node` is in a method of a class another method of which is decorated to run on the
    main process only (speechbrain's `Checkpointer._delete_checkpoint` under `@main_process_only`
    beside `save_checkpoint`): the class is built on every rank, and its ungated methods run there."""
    for scope in ctx.script.ancestors(node):
        if not isinstance(scope, ast.ClassDef):
            continue
        key = f"reach.gated_class.{id(scope)}"
        cached = ctx.script.cache.get(key)
        if not isinstance(cached, bool):
            cached = any(
                main_decorator(dotted(d.func if isinstance(d, ast.Call) else d).rsplit(".", 1)[-1])
                for item in scope.body
                if isinstance(item, FunctionNode)
                for d in item.decorator_list
            ) or _framework_callback(ctx, scope)
            ctx.script.cache[key] = cached
        return cached or _beside_rank_test(ctx, node, scope)
    return False


def _beside_rank_test(ctx: Context, node: ast.AST, cls: ast.ClassDef) -> bool:
    """fairchem's `EnergyTrainer.__init__` tests `if distutils.is_master():`: the class is built on
    every rank, and its `train`, which loops over the training loader and runs the backward, with
    no process test of its own, runs on every rank too. Its other methods may be called from
    elsewhere under a rank test (diffusion-pipe's `save_adapter`): not judged."""
    method = ctx.script.enclosing_function(node)
    if method is None or ctx.script.parents.get(method) is not cls or _picks_its_own_process(method):
        return False
    if not _trains(method):
        return False
    return any(
        isinstance(item, FunctionNode) and item is not method and _tests_rank(ctx, item) for item in cls.body
    )


def _trains(function: FunctionNode) -> bool:
    """A training loop: a `for` over a data loader, or a backward pass (every rank runs both)."""
    return any(
        (isinstance(n, ast.For) and "loader" in ast.unparse(n.iter).lower())
        or (isinstance(n, ast.Call) and dotted(n.func).lower().endswith("backward"))
        for n in ast.walk(function)
    )


# Framework callback classes whose hooks the trainer calls in every process (transformers'
# CallbackHandler, Lightning's callback hooks): a hook's body runs on every rank.
_CALLBACK_BASES = frozenset({"TrainerCallback", "Callback"})
_CALLBACK_ROOTS = ("transformers", "lightning", "pytorch_lightning")


def _framework_callback(ctx: Context, cls: ast.ClassDef) -> bool:
    """`class SaveCallback(TrainerCallback):`: its `on_save`/`on_epoch_end` run on every rank."""
    for base in cls.bases:
        name = ctx.script.qual(base) or ""
        if name.rsplit(".", 1)[-1] in _CALLBACK_BASES and name.startswith(_CALLBACK_ROOTS):
            return True
    return False


def callbacks(ctx: Context) -> set[str]:
    """Functions of this file handed to another call and never called here by name
    (`accelerator.register_save_state_pre_hook(save_model_hook)`): they run where that call runs
    them, on ranks this file does not say."""
    cached = ctx.script.cache.get("reach.callbacks")
    if isinstance(cached, set):
        return cached
    called = {local.name for c in ctx.script.call_list if (local := ctx.script.local_function(c.node))}
    passed = {
        arg.id
        for c in ctx.script.call_list
        if c.tail not in LAUNCHES  # a worker handed to mp.spawn runs on every rank
        and not _starts_job(ctx, c.node)
        for arg in (*c.node.args, *(k.value for k in c.node.keywords))
        if isinstance(arg, ast.Name) and arg.id in ctx.script.functions
    }
    found = passed - called
    ctx.script.cache["reach.callbacks"] = found
    return found


_ENTRY_TAILS = frozenset({"Fire", "run", "CLI", "cli", "main"})
_LOOPS = (ast.For, ast.AsyncFor, ast.While, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def runs_once(ctx: Context, node: ast.AST, depth: int = 4) -> bool:
    """Whether `node` runs once per process, before or after the loops: outside any loop, at module
    level or in a function every use of which runs once (called there, or handed to a launcher as
    the job: `mp.spawn(run)`, Ignite's `parallel.run(run, config)`). A decorated function (an event
    handler such as `@trainer.on(Events.EPOCH_STARTED)`), a hook handed to another call, or a
    function nothing here calls may run any number of times."""
    function = None
    for outer in ctx.script.ancestors(node):
        if isinstance(outer, (*_LOOPS, ast.Lambda)):
            return False  # a lambda is a handler: `add_event_handler(EPOCH_STARTED, lambda e: ...)`
        if isinstance(outer, FunctionNode):
            function = outer
            break
    if function is None:
        return True
    if function.decorator_list or depth == 0:
        return False
    uses = []
    for c in ctx.script.call_list:
        local = ctx.script.local_function(c.node)
        if local is not None and local.name == function.name:
            uses.append(c.node)
        elif any(
            isinstance(arg, ast.Name) and arg.id == function.name
            for arg in (*c.node.args, *(k.value for k in c.node.keywords))
        ):
            if c.tail not in LAUNCHES and c.tail not in _ENTRY_TAILS:
                return False  # a hook: its caller decides how often
            uses.append(c.node)
    return bool(uses) and all(runs_once(ctx, use, depth - 1) for use in uses)


def _starts_job(ctx: Context, call: ast.Call) -> bool:
    """`fire.Fire(train)`, `app.run(main)`, `jsonargparse.CLI(main)` at module level, or any call in
    the `__main__` block: the function handed over is the job itself, run in every process."""
    if _owners(ctx, call):
        return False
    if dotted(call.func).rsplit(".", 1)[-1] in _ENTRY_TAILS:
        return True
    return any(
        isinstance(outer, ast.If) and "__main__" in ctx.script.text(outer.test, 200)
        for outer in ctx.script.ancestors(call)
    )


def _owners(ctx: Context, node: ast.AST) -> list[str]:
    return [a.name for a in ctx.script.ancestors(node) if isinstance(a, FunctionNode | ast.ClassDef)]


def _calls(ctx: Context) -> dict[str, set[str]]:
    """Enclosing function or class name ("" at top level) -> the functions and classes of this file
    it calls."""
    callers: dict[str, set[str]] = {}
    for c in ctx.script.call_list:
        local = ctx.script.local_function(c.node)
        callee = local.name if local is not None else c.tail if c.tail in ctx.script.classes else None
        if callee is None:
            continue
        for owner in _owners(ctx, c.node) or [""]:
            callers.setdefault(owner, set()).add(callee)
    return callers


def _closure(calls: dict[str, set[str]], seeds: set[str]) -> set[str]:
    reached = set(seeds)
    todo = list(seeds)
    while todo:
        for callee in calls.get(todo.pop(), ()):
            if callee not in reached:
                reached.add(callee)
                todo.append(callee)
    return reached


def _reached(ctx: Context) -> set[str]:
    """Functions and classes called from the top level, and from those (closure); and the ones tied
    to the set-up: those that run it, those that call them, and what all of these call."""
    cached = ctx.script.cache.get("reach.reached")
    if isinstance(cached, set):
        return cached
    calls = _calls(ctx)
    # The function that runs the set-up; its class too when that function is `__init__` or a
    # property (the object is distributed from birth: LAVIS's Runner wraps DDP in its `model`
    # property), not when it is one test method among many.
    setup = set()
    for c in ctx.script.call_list:
        owners = _owners(ctx, c.node)
        if c.tail in SETUP_TAILS and owners:
            setup.update(owners[:2] if owners[0] == "__init__" or _in_property(ctx, c.node) else owners[:1])
    callers: dict[str, set[str]] = {}
    for owner, callees in calls.items():
        for callee in callees:
            callers.setdefault(callee, set()).add(owner)
    tied = _closure(callers, setup) - {""}
    reached = (_closure(calls, {""}) | _closure(calls, tied)) - {""}
    ctx.script.cache["reach.reached"] = reached
    return reached


def _in_property(ctx: Context, node: ast.AST) -> bool:
    function = ctx.script.enclosing_function(node)
    return function is not None and any(
        dotted(d).rsplit(".", 1)[-1] in ("property", "cached_property") for d in function.decorator_list
    )


def has_entry(ctx: Context) -> bool:
    """Whether the file runs the job itself: a `__main__` block, work at module level (a loop that
    calls something, a call of its own function or class, the process group's set-up; not a
    setting such as `torch.set_printoptions()`)."""
    cached = ctx.script.cache.get("reach.entry")
    if isinstance(cached, bool):
        return cached
    script = ctx.script
    entry = any(
        (  # a loop that does work; `for tag in TAGS: if ...: break` only fills a constant
            isinstance(stmt, ast.For | ast.While | ast.With)
            and any(isinstance(inner, ast.Call) for inner in ast.walk(stmt))
        )
        or (
            isinstance(stmt, ast.Expr)
            and isinstance(stmt.value, ast.Call)
            and (script.local_function(stmt.value) is not None or dotted(stmt.value.func) in script.classes)
        )
        or (isinstance(stmt, ast.If) and "__main__" in script.text(stmt.test, 200))
        for stmt in script.tree.body
    ) or any(c.tail in SETUP_TAILS and not _owners(ctx, c.node) for c in script.call_list)
    ctx.script.cache["reach.entry"] = entry
    return entry


_EVALUATION_WORDS = ("eval", "valid", "test", "infer", "predict")


def for_evaluation(ctx: Context, node: ast.AST) -> bool:
    """Whether `node` serves evaluation only: its function is named for it or switches the model to
    `.eval()`, or every call of that function in this file is inside such a function
    (`get_dataloader(...)` called only from `pretrain_validation()`). An evaluation pass reads each
    sample once; the order of its batches does not matter."""
    function = ctx.script.enclosing_function(node)
    if function is None:
        return False
    if _evaluates(ctx, function):
        return True
    holders = _callers(ctx).get(id(function), [])
    return bool(holders) and all(h is not None and _evaluates(ctx, h) for h in holders)


def _callers(ctx: Context) -> dict[int, list[FunctionNode | None]]:
    """id(function of this file) -> the function around each call of it (None at module level)."""
    cached = ctx.script.cache.get("reach.callers")
    if isinstance(cached, dict):
        return cached
    found: dict[int, list[FunctionNode | None]] = {}
    for c in ctx.script.call_list:
        local = ctx.script.local_function(c.node)
        if local is not None:
            holder = ctx.script.enclosing_function(c.node)
            found.setdefault(id(local), []).append(holder)
    ctx.script.cache["reach.callers"] = found
    return found


def _evaluates(ctx: Context, function: FunctionNode) -> bool:
    """Named for evaluation (not for training too: `train_validate_test`), or switching the model to
    `.eval()` and never training it (no `.train()`, `.backward()` or `.step()`)."""
    key = f"reach.evaluates.{id(function)}"
    cached = ctx.script.cache.get(key)
    if isinstance(cached, bool):
        return cached
    name = function.name.lower()
    methods = {
        inner.func.attr
        for inner in ast.walk(function)
        if isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute) and not inner.args
    }
    found = ("train" not in name and any(word in name for word in _EVALUATION_WORDS)) or (
        "eval" in methods and not methods & {"train", "backward", "step"}
    )
    ctx.script.cache[key] = found
    return found
