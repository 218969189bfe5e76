"""Periods a rank works out for itself.

A collective under a periodic test (`if step % eval_every == 0`) is taken by every rank at the
same iteration only where every rank holds the same period. A period bound in the function from
values of the rank's own (`eval_every = max(1, EVAL_TOKENS // tokens.numel())`, the first batch's
size; `every = len(shard) // 4`; `every = args.eval_every`) may differ across ranks; one bound to
a literal or a module constant (`log_every = 20`, `every = LOG_EVERY`) cannot. One worked out
from the length of something the rank holds (`eval_every = len(train_loader) // 2`) differs
exactly where the ranks' loaders or shards differ in length (D22).
"""

from __future__ import annotations

import ast

_CALLS = frozenset({"max", "min", "int", "round", "abs", "float", "len", "ceil", "floor"})


def _reads_own_values(value: ast.AST) -> bool:
    """Whether an expression reads a variable (not a module constant in capitals, not a builtin
    called on constants): a value the rank computed or was handed."""
    called = {id(n.func) for n in ast.walk(value) if isinstance(n, ast.Call)}
    for node in ast.walk(value):
        if not isinstance(node, ast.Name) or node.id.isupper():
            continue
        if id(node) in called and node.id in _CALLS:
            continue
        return True
    return False


def _bound(function: ast.AST) -> dict[str, list[ast.AST]]:
    """The values each bare name is bound to in `function` (plain, annotated and walrus binds)."""
    found: dict[str, list[ast.AST]] = {}
    for node in ast.walk(function):
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign | ast.NamedExpr) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        for target in targets:
            if isinstance(target, ast.Name):
                found.setdefault(target.id, []).append(value)
    return found


def _measures_length(value: ast.AST) -> bool:
    """Whether an expression takes `len()` of a variable (a loader, a shard, a file list)."""
    return any(
        isinstance(n, ast.Call)
        and isinstance(n.func, ast.Name)
        and n.func.id == "len"
        and any(_reads_own_values(a) for a in n.args)
        for n in ast.walk(value)
    )


def derived_periods(
    function: ast.AST | None, tests: list[ast.If], *, from_length: bool = False
) -> tuple[int, ...]:
    """Of the `if`s `tests` (around a line of `function`), the lines of those testing `x % name`
    where `name` is bound in `function` to a value read from the rank's own values (with
    `from_length`, to one that takes the length of such a value)."""
    if function is None:
        return ()
    bound = _bound(function)
    reads = _measures_length if from_length else _reads_own_values
    found = []
    for node in tests:
        periods = [
            n.right.id
            for n in ast.walk(node.test)
            if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod) and isinstance(n.right, ast.Name)
        ]
        if any(reads(v) for name in periods for v in bound.get(name, ())):
            found.append(node.lineno)
    return tuple(found)
