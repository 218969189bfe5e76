"""Training loaders a project helper builds for distributed runs, and the epoch loops they feed.

A training script that wraps its model in DDP often gets its loader from a helper of its own
package told that the run is distributed (`make_dataloader(cfg, is_train=True,
distributed=args.distributed)`, `build_loader(..., dist=True)`): by that convention the helper
shards with a DistributedSampler, which shuffles by the epoch it is given. The sampler is not
visible here, but the epoch loop that consumes the loader is, and so is the absence of any
`set_epoch` call.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from triage.core.lint.context import Context
from triage.core.lint.script import Call, dotted

# Keywords a loader helper takes to know it should shard for the processes.
_DISTRIBUTED_KEYWORDS = frozenset({"distributed", "dist", "is_distributed", "use_distributed", "ddp"})
# Keywords that say which split the helper builds.
_TRAIN_KEYWORDS = ("is_train", "train", "training", "is_training")
_EVAL_WORDS = ("val", "test", "eval", "infer", "predict")
REPLAYS = (
    "builds this distributed run's training loader, but nothing calls set_epoch(): every epoch"
    " replays epoch 0's order; call loader.sampler.set_epoch(epoch) each epoch"
)


def distributed_helper_loaders(ctx: Context, handed: set[str]) -> list[Call]:
    """Calls of a loader helper told the run is distributed, building a training loader that an
    epoch loop of this file consumes; not one `handed` to a runner (which sets the epoch itself)."""
    found = []
    for call in ctx.script.call_list:
        if "loader" not in call.tail.lower() or not _told_distributed(call):
            continue
        names = bound_names(ctx, call)
        if not names or names & handed or not _training(call, names):
            continue
        if any(_fed_to_epochs(loop, names) for loop in _epoch_loops(ctx)):
            found.append(call)
    return found


def _told_distributed(call: Call) -> bool:
    for keyword in call.node.keywords:
        if keyword.arg in _DISTRIBUTED_KEYWORDS:
            value = keyword.value
            return not (isinstance(value, ast.Constant) and not value.value)
    return False


def _training(call: Call, names: set[str]) -> bool:
    """Not a helper call that builds an evaluation loader (`is_train=False`, `split="val"`, a
    result bound to `val_loader`)."""
    for keyword in call.node.keywords:
        value = keyword.value
        if keyword.arg in _TRAIN_KEYWORDS and isinstance(value, ast.Constant) and not value.value:
            return False
        text = value.value.lower() if isinstance(value, ast.Constant) and isinstance(value.value, str) else ""
        if any(word in text for word in _EVAL_WORDS):
            return False
    return not any(word in name.lower() for name in names for word in _EVAL_WORDS)


def bound_names(ctx: Context, call: Call) -> set[str]:
    """The names an assignment binds to the call's result (`loader, sampler = build(...)`)."""
    parent = ctx.script.parents.get(call.node)
    if not isinstance(parent, ast.Assign):
        return set()
    names: set[str] = set()
    for target in parent.targets:
        elements = target.elts if isinstance(target, ast.Tuple) else [target]
        names |= {dotted(e) for e in elements if isinstance(e, ast.Name | ast.Attribute)}
    names.discard("")
    return names


def _epoch_loops(ctx: Context) -> Iterator[ast.For]:
    for node in ast.walk(ctx.script.tree):
        if (
            isinstance(node, ast.For)
            and isinstance(node.target, ast.Name)
            and "epoch" in node.target.id.lower()
        ):
            yield node


def _fed_to_epochs(loop: ast.For, names: set[str]) -> bool:
    """The loader is read in the loop's body: iterated there or handed to the step that iterates."""
    return any(
        isinstance(node, ast.Name | ast.Attribute) and dotted(node) in names
        for statement in loop.body
        for node in ast.walk(statement)
    )
