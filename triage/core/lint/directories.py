"""A directory every rank makes: `os.mkdir` and `Path.mkdir` without `exist_ok`, whether an
`if not exists:` guards it, and whether the ranks take turns making it (rank 0 first)."""

from __future__ import annotations

import ast

from triage.core.lint.communication import IN_TURN
from triage.core.lint.context import Context
from triage.core.lint.script import Call, dotted


def created_in_turn(ctx: Context, call: Call) -> bool:
    """A directory made under `if not exists:` while the ranks take turns: inside
    `with accelerator.main_process_first():` (or `torch_distributed_zero_first`), or after
    `if rank != 0: dist.barrier()` in the same function (rank 0 goes first, then releases the
    others with its own barrier). The first rank creates it; the others find it and skip."""
    guarded = exists_guarded(ctx, call)
    if not guarded:
        return False
    for outer in ctx.script.ancestors(call.node):
        if isinstance(outer, ast.With) and any(
            isinstance(item.context_expr, ast.Call)
            and dotted(item.context_expr.func).rsplit(".", 1)[-1] in IN_TURN
            for item in outer.items
        ):
            return True
    return any(
        isinstance(node, ast.If)
        and node.lineno < call.node.lineno
        and ctx.ranks.side(node.test, call.scope) == "nonzero"
        and any(isinstance(c, ast.Call) and dotted(c.func).endswith("barrier") for c in ast.walk(node))
        for node in ast.walk(call.scope)
    )


def exists_guarded(ctx: Context, call: Call) -> bool:
    """Under `if not os.path.exists(d):` / `if not d.exists():` / `isdir`."""
    return any(
        isinstance(outer, ast.If)
        and isinstance(outer.test, ast.UnaryOp)
        and isinstance(outer.test.op, ast.Not)
        and any(w in ctx.script.text(outer.test, 120) for w in ("exists", "isdir"))
        for outer in ctx.script.ancestors(call.node)
    )


def path_mkdir(ctx: Context, call: Call) -> bool:
    """`os.mkdir(d)` or a pathlib `d.mkdir()` whose `exist_ok` is not true."""
    if call.tail != "mkdir" or not (call.name == "os.mkdir" or call.receiver is not None):
        return False
    if call.name.startswith(("os.", "pathlib.")) and call.name != "os.mkdir":
        return False
    exist_ok = call.kwarg("exist_ok")
    if exist_ok is None and call.name != "os.mkdir" and len(call.node.args) >= 3:
        exist_ok = call.node.args[2]  # Path.mkdir(mode, parents, exist_ok)
    return not (exist_ok is not None and not (isinstance(exist_ok, ast.Constant) and exist_ok.value is False))
