"""How data reaches the ranks (D9, D22).

TRG009: data split per rank in a way that can give ranks different numbers of batches
        (`data[rank::world_size]`, an IterableDataset that shards by rank, `split_dataset_by_node`)
        in a gradient-synchronising script that never uses `Join`.
TRG022: a shuffling DistributedSampler whose `set_epoch` is never called.
TRG024: a DataLoader given both a sampler and `shuffle=True` (or a batch_sampler and what it
        excludes): DataLoader raises ValueError.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from triage.core.lint.context import Context
from triage.core.lint.data_lengths import evaluated_without_sync, step_budget, streamed
from triage.core.lint.epoch_loaders import REPLAYS, distributed_helper_loaders
from triage.core.lint.model import Finding, Rule
from triage.core.lint.patterns import is_backward, keyword_value, kwarg_true, value_before, world_size
from triage.core.lint.reach import for_evaluation, has_entry, reached, runs_once
from triage.core.lint.script import Call, FunctionNode, Scope, dotted

TRG009 = Rule(
    code="TRG009",
    entry="D9",
    severity="warning",
    name="uneven-rank-data",
    message="the data is split per rank without equal lengths, so ranks can run different numbers of steps",
    fix="shard with DistributedSampler (it pads to equal lengths), truncate every rank to a common length, or wrap the loop in Join",
    fact="lint.uneven_rank_data",
    finds=(
        "In a script that synchronises gradients (DDP, FSDP, DeepSpeed) and never uses"
        " `torch.distributed.algorithms.join.Join`: slicing by rank (`items[rank::world_size]`), an"
        " `IterableDataset` subclass that reads the rank to shard its stream, `split_dataset_by_node`, and a"
        " training loop whose number of steps depends on the rank (`range(n + rank)`, a list built from one)."
    ),
    why=(
        "Every backward ends with an all-reduce, so every rank must run the same number of steps."
        " `len(data)` not divisible by the world size, or streams of different lengths, give one rank"
        " fewer batches: it leaves the loop, the others wait in their next all-reduce, and the job"
        " freezes on the last step until the collective timeout."
    ),
    example=(
        "import torch.distributed as dist\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n\n"
        "model = DDP(model, device_ids=[local_rank])\n"
        "rank, world = dist.get_rank(), dist.get_world_size()\n"
        "shard = files[rank::world]\n"
    ),
    fixed=(
        "import torch.distributed as dist\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n\n"
        "model = DDP(model, device_ids=[local_rank])\n"
        "rank, world = dist.get_rank(), dist.get_world_size()\n"
        "usable = len(files) // world * world  # the same count on every rank\n"
        "shard = files[:usable][rank::world]\n"
    ),
)
TRG022 = Rule(
    code="TRG022",
    entry="D22",
    severity="warning",
    name="sampler-without-set-epoch",
    message="DistributedSampler shuffles, but set_epoch is never called: every epoch replays the same order",
    fix="call `sampler.set_epoch(epoch)` at the start of every epoch",
    fact="lint.sampler_without_set_epoch",
    finds=(
        "`DistributedSampler(...)` with shuffling on (the default) in a script that never calls"
        " `.set_epoch(...)` on anything. Lightning and the HF Trainer call it themselves and are not"
        " reported."
    ),
    why=(
        "The sampler's permutation comes from `seed + epoch`, and the epoch changes only through"
        " `set_epoch`. Without it every epoch sees the same batches in the same order with the same"
        " per-rank split; nothing errors, the model just sees less variety than the curve suggests."
    ),
    example=(
        "from torch.utils.data import DataLoader\nfrom torch.utils.data.distributed import DistributedSampler\n\n"
        "sampler = DistributedSampler(dataset)\n"
        "loader = DataLoader(dataset, batch_size=32, sampler=sampler)\n"
        "for epoch in range(epochs):\n"
        "    for batch in loader:\n"
        "        train_step(batch)\n"
    ),
    fixed=(
        "from torch.utils.data import DataLoader\nfrom torch.utils.data.distributed import DistributedSampler\n\n"
        "sampler = DistributedSampler(dataset)\n"
        "loader = DataLoader(dataset, batch_size=32, sampler=sampler)\n"
        "for epoch in range(epochs):\n"
        "    sampler.set_epoch(epoch)\n"
        "    for batch in loader:\n"
        "        train_step(batch)\n"
    ),
)
TRG024 = Rule(
    code="TRG024",
    entry="D22",
    severity="error",
    name="sampler-with-shuffle",
    message="the DataLoader gets a sampler and shuffle=True, which it refuses with ValueError",
    fix="drop `shuffle=True` from the DataLoader: the DistributedSampler shuffles (its own `shuffle=` says whether)",
    finds=(
        "`DataLoader(..., sampler=<a sampler>, shuffle=True)` where the sampler is a `*Sampler(...)` whenever"
        " it is not None (built in the call, or so assigned in the function, `DistributedSampler(ds) if"
        " distributed else None` included: it meets shuffle=True in every distributed run), and `batch_sampler=` together with"
        " `shuffle=True`, `sampler=`, `drop_last=True` or a `batch_size` other than 1."
        " `shuffle=(sampler is None)` is the right idiom and is not reported."
    ),
    why=(
        "A sampler decides the order, so DataLoader refuses a second order: `ValueError: sampler option"
        " is mutually exclusive with shuffle` (and `batch_sampler option is mutually exclusive with"
        " batch_size, shuffle, sampler, and drop_last`). Moving a single-GPU script to DistributedSampler"
        " often leaves the old `shuffle=True` behind, and the job dies on every rank at start."
    ),
    example=(
        "from torch.utils.data import DataLoader\nfrom torch.utils.data.distributed import DistributedSampler\n\n"
        "sampler = DistributedSampler(dataset)\n"
        "loader = DataLoader(dataset, batch_size=32, sampler=sampler, shuffle=True)\n"
        "for epoch in range(epochs):\n"
        "    sampler.set_epoch(epoch)\n"
    ),
    fixed=(
        "from torch.utils.data import DataLoader\nfrom torch.utils.data.distributed import DistributedSampler\n\n"
        "sampler = DistributedSampler(dataset, shuffle=True)\n"
        "loader = DataLoader(dataset, batch_size=32, sampler=sampler)\n"
        "for epoch in range(epochs):\n"
        "    sampler.set_epoch(epoch)\n"
    ),
)
RULES = (TRG009, TRG022, TRG024)

_EVAL_WORDS = ("val", "test", "eval")
_PADDING_WORDS = ("total_size", "num_samples", "pad", "drop_last", "min(")


def _synchronises(ctx: Context) -> bool:
    return ctx.wrappers.of_kind("ddp", "fsdp", "fsdp2", "deepspeed")


def _padded_nearby(ctx: Context, node: ast.AST) -> bool:
    """A custom sampler that pads or truncates before slicing (`indices += indices[:pad]`) is even."""
    scope = ctx.script.scope_of(node)
    text = ast.get_source_segment(ctx.script.source, scope) if not isinstance(scope, ast.Module) else ""
    return any(word in (text or "") for word in _PADDING_WORDS)


def _check_uneven(ctx: Context) -> Iterator[Finding]:
    script = ctx.script
    if not _synchronises(ctx) or "Join" in script.imports or any(script.calls("Join")):
        return
    world = world_size(script)
    for node in [*script.of_type(ast.Subscript), *script.of_type(ast.ClassDef)]:
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice):
            part = node.slice
            if part.lower is None or part.step is None or part.upper is not None or _truncated(node.value):
                continue
            scope = script.scope_of(node)
            if (
                ctx.ranks.rank_kind(part.lower, scope)
                and world.is_world_size(part.step)
                and not _padded_nearby(ctx, node)
            ):
                yield ctx.finding(
                    TRG009,
                    node,
                    f"`{script.text(node, 40)}` gives ranks different counts whenever the length is not a multiple"
                    " of the world size: the short rank leaves the loop and the others hang in their all-reduce",
                )
        elif isinstance(node, ast.ClassDef) and _iterable_dataset(ctx, node):
            yield ctx.finding(
                TRG009,
                node,
                f"IterableDataset `{node.name}` shards its stream by rank: unless every rank's share has the same"
                " length, one rank stops early and the others hang; truncate to a common length or use Join",
            )
    yield from _check_rank_loops(ctx)
    for call in script.calls("split_dataset_by_node"):
        if evaluated_without_sync(ctx, call) or (streamed(ctx, call) and step_budget(ctx, call)):
            continue
        yield ctx.finding(
            TRG009,
            call.node,
            "split_dataset_by_node() can give ranks different numbers of examples (uneven shards or stream"
            " lengths): one rank finishes early and the others hang in their all-reduce; use Join or equalise",
        )


def _rank_dependent(ctx: Context, expr: ast.AST, scope: Scope) -> bool:
    for node in ast.walk(expr):
        if isinstance(node, ast.Name | ast.Attribute | ast.Call) and ctx.ranks.rank_kind(node, scope):
            return True
        if isinstance(node, ast.IfExp) and ctx.ranks.side(node.test, scope):
            return True
    return False


def _rank_length(ctx: Context, iterable: ast.AST, loop: ast.AST, depth: int = 0) -> ast.AST | None:
    """The expression that makes a loop's length depend on the rank: `range(3 + 2 * rank)`, or a
    list built from one (through one name assigned earlier in the same function)."""
    scope = ctx.script.scope_of(loop)
    if isinstance(iterable, ast.Call):
        name = ctx.script.qual(iterable.func) or ""
        if name == "range" and any(_rank_dependent(ctx, a, scope) for a in iterable.args):
            return iterable
        if name in ("enumerate", "list", "tuple", "sorted", "reversed") and iterable.args:
            return _rank_length(ctx, iterable.args[0], loop, depth)
    elif isinstance(iterable, ast.ListComp | ast.GeneratorExp):
        for generator in iterable.generators:
            found = _rank_length(ctx, generator.iter, loop, depth)
            if found is not None:
                return found
    elif isinstance(iterable, ast.Name) and depth == 0:
        for node in ast.walk(scope):
            if (
                isinstance(node, ast.Assign)
                and node.lineno < getattr(loop, "lineno", 0)
                and any(isinstance(t, ast.Name) and t.id == iterable.id for t in node.targets)
            ):
                return _rank_length(ctx, node.value, loop, depth + 1)
    return None


def _check_rank_loops(ctx: Context) -> Iterator[Finding]:
    """A training loop whose number of steps depends on the rank."""
    for loop in ctx.script.of_type(ast.For):
        cause = _rank_length(ctx, loop.iter, loop)
        if cause is None:
            continue
        inner = {id(n) for n in ast.walk(loop) if isinstance(n, ast.Call)}
        syncs = any(id(c.node) in inner and is_backward(c) for c in ctx.script.call_list)
        if syncs:
            yield ctx.finding(
                TRG009,
                loop,
                f"the number of steps of this loop depends on the rank (`{ctx.script.text(cause, 40)}`): ranks run"
                " different numbers of backward passes, and the ones with more hang in an all-reduce",
            )


def _truncated(expr: ast.AST) -> bool:
    """`items[:n][rank::world]`: cut to a common length first."""
    return (
        isinstance(expr, ast.Subscript) and isinstance(expr.slice, ast.Slice) and expr.slice.upper is not None
    )


def _iterable_dataset(ctx: Context, node: ast.ClassDef) -> bool:
    bases = [(ctx.script.qual(b) or "").rsplit(".", 1)[-1] for b in node.bases]
    if "IterableDataset" not in bases:
        return False
    for inner in ast.walk(node):
        if isinstance(inner, ast.Name | ast.Attribute | ast.Call) and ctx.ranks.rank_kind(
            inner, ctx.script.scope_of(inner)
        ):
            return not _padded_nearby(ctx, inner)
    return False


def _check_set_epoch(ctx: Context) -> Iterator[Finding]:
    script = ctx.script
    if script.frameworks & {"lightning", "hf_trainer"}:
        return
    # A set_epoch that runs once, before the epochs (Ignite's code-generator called it at set-up
    # until 0c19ad2 moved it into an EPOCH_STARTED handler), leaves every epoch with one order.
    epochs = list(script.calls("set_epoch"))
    if not all(runs_once(ctx, c.node) for c in epochs):
        return
    once = f" except once, at line {epochs[0].node.lineno}, before the epochs" if epochs else ""
    samplers = list(script.calls("DistributedSampler"))
    # The sampler is built elsewhere (`idist.auto_dataloader`); a loader's own `set_epoch` is a
    # wrapper's (Accelerate's prepared loader sets the epoch itself as each one starts).
    receiver = epochs[0].receiver if epochs else None
    if not samplers and receiver is not None and "sampler" in dotted(receiver).lower():
        yield ctx.finding(
            TRG022,
            epochs[0].node,
            "set_epoch() runs once, before the epochs, not at the start of each: every epoch uses the"
            " permutation of that one epoch; call it in the epoch loop (or an epoch-start handler)",
        )
    for call in samplers:
        shuffle = call.kwarg("shuffle")
        if isinstance(shuffle, ast.Constant) and shuffle.value is False:
            continue
        data = call.node.args[0] if call.node.args else call.kwarg("dataset")
        if data is not None and any(w in script.text(data, 80).lower() for w in _EVAL_WORDS):
            continue  # an evaluation sampler: its order does not matter
        if for_evaluation(ctx, call.node):
            continue
        if _handed_away(ctx, call) or _builder_for_another_module(ctx, call):
            continue
        yield ctx.finding(
            TRG022,
            call.node,
            f"this DistributedSampler shuffles, but nothing calls set_epoch(){once}: every epoch uses"
            " epoch 0's permutation (same batches, same order); call sampler.set_epoch(epoch) each epoch",
        )
    if not (samplers or epochs) and ctx.wrappers.of_kind("ddp", "fsdp"):
        for call in distributed_helper_loaders(ctx, handed=run_arguments(ctx))[:1]:
            yield ctx.finding(TRG022, call.node, f"{ctx.script.text(call.node.func, 40)}() {REPLAYS}")


def _builder_for_another_module(ctx: Context, call: Call) -> bool:
    """A function of a library module that returns (or yields) what it built (`build_loader(config)`):
    the training script that calls it iterates the epochs and may set them."""
    function = ctx.script.scope_of(call.node)
    if has_entry(ctx) or not isinstance(function, FunctionNode):
        return False
    # A method of a class this file sets up (a strategy whose `setup_distributed` runs the process
    # group) that nothing here calls still hands its loader to the trainer of another module.
    if reached(ctx, call.node) and any(
        (local := ctx.script.local_function(c.node)) is not None and local.name == function.name
        for c in ctx.script.call_list
    ):
        return False
    return any(
        isinstance(node, ast.Yield | ast.YieldFrom)
        or (isinstance(node, ast.Return) and node.value is not None)
        for node in ast.walk(function)
    )


# Runners that set the epoch of what they are handed: Ignite and mmcv `run`, Lightning `fit`,
# Accelerate `prepare` and Fabric `setup_dataloaders` (their loaders call set_epoch as each epoch starts).
_RUNNER_TAILS = frozenset({"fit", "run", "run_epoch", "train_loop", "prepare", "setup_dataloaders"})


def _handed_away(ctx: Context, call: Call) -> bool:
    """Whether the sampler is passed to code in another module, which may call set_epoch itself;
    or the loader built on it is handed to a runner from another module (`engine.run(loader)`,
    `runner.fit(loader)`, `Trainer(model, loader)`), which sets the epoch as it starts each one."""
    parent = ctx.script.parents.get(call.node)
    names = {dotted(t) for t in parent.targets} if isinstance(parent, ast.Assign) else set()
    if names & _external_arguments(ctx):
        return True
    loaders: set[str] = set()
    for loader in ctx.script.calls("DataLoader"):
        given = loader.kwarg("sampler")
        if given is call.node or (given is not None and dotted(given) in names):
            holder = ctx.script.parents.get(loader.node)
            if isinstance(holder, ast.Assign):
                loaders |= {dotted(t) for t in holder.targets}
    loaders.discard("")
    return bool(loaders & run_arguments(ctx))


def run_arguments(ctx: Context) -> set[str]:
    """Names handed to a runner from another module: `engine.run(loader)`, `Trainer(model, loader)`."""
    found = ctx.script.cache.get("data.run_arguments")
    if isinstance(found, set):
        return found
    names: set[str] = set()
    for runner in ctx.script.call_list:
        if runner.name.startswith("torch") or ctx.script.local_function(runner.node) is not None:
            continue
        if runner.tail in _RUNNER_TAILS or (
            runner.tail[:1].isupper() and runner.tail not in ctx.script.classes
        ):
            names |= {dotted(arg) for arg in [*runner.node.args, *(k.value for k in runner.node.keywords)]}
    ctx.script.cache["data.run_arguments"] = names
    return names


def _external_arguments(ctx: Context) -> set[str]:
    """Names passed to calls into other modules (not torch, not this file's own functions)."""
    found = ctx.script.cache.get("external_arguments")
    if isinstance(found, set):
        return found
    names: set[str] = set()
    for other in ctx.script.call_list:
        if other.name.startswith("torch") or other.tail == "DataLoader":
            continue
        if ctx.script.local_function(other.node) is not None:
            continue
        for arg in [*other.node.args, *(k.value for k in other.node.keywords)]:
            if isinstance(arg, ast.Name | ast.Attribute):
                names.add(dotted(arg))
    names.discard("")
    ctx.script.cache["external_arguments"] = names
    return names


def _a_sampler(ctx: Context, expr: ast.expr | None, at: ast.AST) -> ast.Call | None:
    """The `*Sampler(...)` call `expr` is whenever it is not None: built there, assigned just
    before, or one of the values its name takes in this function (`sampler = DistributedSampler(ds)
    if distributed else None`: a sampler in exactly the runs that matter)."""
    if expr is None:
        return None
    values: list[ast.expr] = [expr]
    if isinstance(expr, ast.Name):
        scope = ctx.script.scope_of(at)
        values += [
            node.value
            for node in ctx.script.of_type(ast.Assign)
            if ctx.script.scope_of(node) is scope and [dotted(t) for t in node.targets] == [expr.id]
        ]
    elif not isinstance(expr, ast.Call):
        values.append(value_before(ctx.script, expr, at) or expr)
    for value in values:
        for arm in (value.body, value.orelse) if isinstance(value, ast.IfExp) else (value,):
            if isinstance(arm, ast.Call) and (ctx.script.qual(arm.func) or "").endswith("Sampler"):
                return arm
    return None


def _check_sampler_and_shuffle(ctx: Context) -> Iterator[Finding]:
    for call in ctx.script.calls("DataLoader"):
        if not call.name.startswith(("torch.", "DataLoader")):
            continue
        sampler = _a_sampler(ctx, call.kwarg("sampler"), call.node)
        shuffle = keyword_value(ctx.script, call, "shuffle")
        if sampler is not None and isinstance(shuffle, ast.Constant) and shuffle.value is True:
            yield ctx.finding(
                TRG024,
                call.node,
                f"DataLoader(sampler=..., shuffle=True) raises `ValueError: sampler option is mutually exclusive"
                f" with shuffle` (the sampler is a `{ctx.script.text(sampler.func, 60).rsplit('.', 1)[-1]}`, line"
                f" {sampler.lineno}); drop shuffle=True, the"
                " sampler decides the order",
            )
        if _a_sampler(ctx, call.kwarg("batch_sampler"), call.node) is None:
            continue
        size = call.kwarg("batch_size") or (call.node.args[1] if len(call.node.args) > 1 else None)
        clashes = [
            word
            for word, given in (
                ("shuffle=True", kwarg_true(call, "shuffle")),
                ("sampler", call.kwarg("sampler") is not None),
                ("drop_last=True", kwarg_true(call, "drop_last")),
                (
                    "batch_size",
                    size is not None and not (isinstance(size, ast.Constant) and size.value in (None, 1)),
                ),
            )
            if given
        ]
        if clashes:
            yield ctx.finding(
                TRG024,
                call.node,
                f"DataLoader(batch_sampler=..., {', '.join(clashes)}) raises `ValueError: batch_sampler option is"
                " mutually exclusive with batch_size, shuffle, sampler, and drop_last`; the batch sampler"
                " makes the batches, so pass only it",
            )


def check(ctx: Context) -> Iterator[Finding]:
    """Every finding of this module's rules on one script."""
    yield from _check_uneven(ctx)
    yield from _check_set_epoch(ctx)
    yield from _check_sampler_and_shuffle(ctx)
