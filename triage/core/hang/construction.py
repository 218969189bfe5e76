"""Where the objects a method belongs to are made, read from the source.

A method's collective runs only on the ranks that hold an instance of its class. Where every
place the source makes that class (`ModelCheckpoint(...)`) sits inside an `if` (or `x if test
else y`), only the processes whose test held have one: a callback registered from a per-rank
config (`if cfg["checkpoint"]["enabled"]: callbacks.append(ModelCheckpoint(...))`), a writer made
on the main process only; a custom autograd Function applied only under an `if` (`if long:
k = GatherKeys.apply(k)`) runs its `backward` only there. A class made anywhere outside an `if`
(or only under `if __name__ == "__main__":`, which every process runs) says nothing.
"""

from __future__ import annotations

import ast
import itertools

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _owner(chain: list[ast.AST]) -> str:
    """The class whose method holds the line (its innermost function's class), or ''."""
    for i, (outer, inner) in enumerate(itertools.pairwise(chain)):
        own = not any(isinstance(n, _FUNCTIONS) for n in chain[i + 2 :])
        if isinstance(outer, ast.ClassDef) and isinstance(inner, _FUNCTIONS) and own:
            return outer.name
    return ""


def _is_making(node: ast.AST, owner: str) -> bool:
    """A call that makes `owner` (`Owner(...)`), or runs it where it is a custom autograd Function
    (`Owner.apply(...)`: its `backward` runs only where its forward was applied)."""
    if not isinstance(node, ast.Call):
        return False
    names = ast.unparse(node.func).split(".")
    return names[-1] == owner or names[-2:] == [owner, "apply"]


def suppressing_with(chain: list[ast.AST]) -> tuple[int, int] | None:
    """The innermost `with contextlib.suppress(...)` (or `suppress(...)`) of the line's own function
    around it, as (its line, its last line): its body's exceptions are swallowed there."""
    for node in reversed(chain):
        if isinstance(node, _FUNCTIONS):
            return None
        if isinstance(node, ast.With | ast.AsyncWith) and any(
            isinstance(i.context_expr, ast.Call)
            and ast.unparse(i.context_expr.func).split(".")[-1] == "suppress"
            for i in node.items
        ):
            return node.lineno, node.end_lineno or node.lineno
    return None


def made_only_under(tree: ast.AST, chain: list[ast.AST], source: str) -> str:
    """The test of the first `if` around a call that makes the class whose method holds the line,
    where every such call sits under one, or ''."""
    owner = _owner(chain)
    if not owner:
        return ""
    tests: list[str] = []
    guarded: set[int] = set()
    for node in ast.walk(tree):
        # `if __name__ == "__main__":` runs on every process: it guards nothing here.
        if not isinstance(node, ast.If | ast.IfExp) or "__name__" in ast.unparse(node.test):
            continue
        parts = [*node.body, *node.orelse] if isinstance(node, ast.If) else [node.body, node.orelse]
        calls = {id(c) for p in parts for c in ast.walk(p) if _is_making(c, owner)}
        if calls - guarded:
            tests.append(ast.get_source_segment(source, node.test) or ast.unparse(node.test))
        guarded |= calls
    made = {id(c) for c in ast.walk(tree) if _is_making(c, owner)}
    return tests[0] if made and made <= guarded else ""
