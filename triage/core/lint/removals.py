"""Removals every rank performs on one path: a move, a check-then-remove (an existence test or a
directory listing before it), or a whole tree deleted (TRG023's removal cases, rules_side_effects)."""

from __future__ import annotations

import ast

from triage.core.lint.context import Context
from triage.core.lint.patterns import kwarg_true
from triage.core.lint.script import Call, dotted
from triage.core.lint.write_targets import mentions_rank, temporary

# A file moved away by one process is gone for the next; `if exists(p): os.remove(p)` on N processes
# is a check-then-act race: all find it, one removes it, the others fail.
_MOVES = frozenset({"shutil.move"})
_REMOVALS = frozenset({"os.remove", "os.unlink"})


def shared_removal(ctx: Context, call: Call) -> bool:
    """A move, or a removal after an existence test, of a path every process names alike: not
    the rank's own, not a temporary one, not a `finally:` clean-up of this process's own file, and
    not under a handler that expects the file gone (`try: os.remove(p) except OSError: pass`)."""
    if not call.node.args or not (
        call.name in _MOVES or (call.name in _REMOVALS and (_tested(ctx, call) or _listed(ctx, call)))
    ):
        return False
    path = call.node.args[0]
    if mentions_rank(ctx, path, call) or temporary(ctx, path, call):
        return False
    child: ast.AST = call.node
    for parent in ctx.script.ancestors(call.node):
        if isinstance(parent, ast.Try) and (
            child in parent.finalbody
            or (child in parent.body and any(map(_expects_missing, parent.handlers)))
        ):
            return False
        child = parent
    return True


def tree_removal(ctx: Context, call: Call) -> bool:
    """`shutil.rmtree(p)`, or a file-system object's (fsspec, gfile) `fs.rmtree(p)` or
    `fs.rm(p, recursive=True)`, of a path that is not temporary and with no errors ignored."""
    if call.name == "shutil.rmtree":
        if kwarg_true(call, "ignore_errors") or len(call.node.args) != 1:
            return False
    elif call.receiver is None or not (
        call.tail == "rmtree" or (call.tail == "rm" and kwarg_true(call, "recursive"))
    ):
        return False
    path = call.node.args[0] if call.node.args else call.kwarg("path")
    return path is not None and not temporary(ctx, path, call)


def _tested(ctx: Context, call: Call) -> bool:
    """Under `if os.path.exists(p):` / `isfile` / `p.exists()`."""
    return any(
        isinstance(outer, ast.If) and any(w in ctx.script.text(outer.test, 120) for w in ("exists", "isfile"))
        for outer in ctx.script.ancestors(call.node)
    )


# A directory listing is an existence test too: every process lists the same folder, finds the
# same old files and removes them (keep-last-k checkpoint pruning).
_LISTINGS = frozenset({"os.listdir", "os.scandir", "os.walk", "glob.glob", "glob.iglob"})


def _listed(ctx: Context, call: Call) -> bool:
    """In a function that lists a directory (`os.listdir`, `glob.glob`, `p.glob()`, `p.iterdir()`)."""
    function = ctx.script.enclosing_function(call.node)
    if function is None:
        return False
    return any(
        isinstance(node, ast.Call)
        and (
            ctx.script.qual(node.func) in _LISTINGS
            or (isinstance(node.func, ast.Attribute) and node.func.attr in ("iterdir", "glob", "rglob"))
        )
        for node in ast.walk(function)
    )


def _expects_missing(handler: ast.ExceptHandler) -> bool:
    caught = handler.type
    names = (
        [dotted(e) for e in caught.elts]
        if isinstance(caught, ast.Tuple)
        else [dotted(caught) if caught else ""]
    )
    expected = ("", "OSError", "FileNotFoundError", "IOError", "Exception", "BaseException")
    return any(n.rsplit(".", 1)[-1] in expected for n in names)
