"""The `break`s and `return`s of the loops around a line that only some ranks can take.

An outer loop left through a jump under a rank test (`if rank == 0: ... break`: early stopping
decided on the main process) runs fewer times there: a rank out of it while the others are still
inside it, in an inner loop, left on that decision (D19), not at the end of its data. The line's
own innermost loop is read by `jumps` already; this reads every loop of the line's function.
"""

from __future__ import annotations

import ast
import re

_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
# Any `if` test: rank_jumps() with it finds every guarded jump, whatever the test reads.
ANY_TEST = re.compile(r"\S")


def _rank_jumps(
    loop: ast.For | ast.AsyncFor | ast.While, source: str, rank_test: re.Pattern[str]
) -> list[tuple[int, int, str]]:
    """(loop's first line, jump line, kind) for each `break` / `return` of `loop` itself (not of a
    loop or function inside it) with a rank test among the `if`s above it inside the loop."""
    found: list[tuple[int, int, str]] = []

    def visit(node: ast.AST, ranked: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (*_FUNCTIONS, *_LOOPS)):
                continue  # a jump in a nested loop or function does not leave this loop
            test = (ast.get_source_segment(source, child.test) or "") if isinstance(child, ast.If) else ""
            now = ranked or bool(test and rank_test.search(test))
            if now and isinstance(child, ast.Break | ast.Return):
                found.append((loop.lineno, child.lineno, type(child).__name__.lower()))
            visit(child, now)

    visit(loop, False)
    return found


def rank_jumps(
    chain: list[ast.AST], source: str, rank_test: re.Pattern[str]
) -> tuple[tuple[int, int, str], ...]:
    """The rank-guarded jumps of every loop in `chain` (the nodes around a line, outermost first)
    after its last function: (loop's first line, jump line, "break" / "return")."""
    start = max((i + 1 for i, n in enumerate(chain) if isinstance(n, _FUNCTIONS)), default=0)
    found: list[tuple[int, int, str]] = []
    for node in chain[start:]:
        if isinstance(node, _LOOPS):
            found += _rank_jumps(node, source, rank_test)
    return tuple(sorted(set(found)))
