"""Tests that single out ranks through a name: `if pbar is not None:` where the function made
`pbar = tqdm(...) if rank == 0 else None`, `if self.writer:` where `__init__` set the writer
under `if is_main_process:` and `None` otherwise. The test reads no rank, but only the ranks that
made the object pass it, so a collective under it is as rank-conditional as one under the rank
test itself (the progress bar, the TensorBoard writer, the logger made on the main process).
"""

from __future__ import annotations

import ast
import re

_EMPTY = (None, False)


def _empty(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Constant) and node.value in _EMPTY


def _rank_made(scope: ast.AST, source: str, rank_test: re.Pattern[str]) -> dict[str, str]:
    """Names (`pbar`, `self.writer`) `scope` binds to an object on some ranks and to None or False
    on the others: name -> the rank test that decides."""
    made: dict[str, str] = {}

    def bind(targets: list[ast.expr], test: str) -> None:
        for target in targets:
            if isinstance(target, ast.Name | ast.Attribute):
                made.setdefault(ast.unparse(target), test)

    for node in ast.walk(scope):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.IfExp):
            value = node.value
            test = ast.get_source_segment(source, value.test) or ""
            if rank_test.search(test) and (_empty(value.body) != _empty(value.orelse)):
                bind(node.targets, test)
        elif isinstance(node, ast.If):
            test = ast.get_source_segment(source, node.test) or ""
            if not rank_test.search(test):
                continue
            for stmt in node.body:
                if isinstance(stmt, ast.Assign) and not _empty(stmt.value):
                    bind(stmt.targets, test)
    return made


def _names(test: ast.expr) -> set[str]:
    return {ast.unparse(n) for n in ast.walk(test) if isinstance(n, ast.Name | ast.Attribute)}


def aliased_rank_test(
    tree: ast.AST, function: ast.AST | None, test: ast.expr, source: str, rank_test: re.Pattern[str]
) -> str | None:
    """The rank test behind `test` (an `if` test of `function` that reads no rank) when it tests a
    name made on some ranks only: plain names made in `function`, attributes anywhere in the
    module (`self.writer` set in `__init__`); None otherwise."""
    names = _names(test)
    if not names:
        return None
    made = _rank_made(function, source, rank_test) if function is not None else {}
    if any("." in name for name in names):
        made = {**{k: v for k, v in _rank_made(tree, source, rank_test).items() if "." in k}, **made}
    found = next((name for name in sorted(names) if name in made), None)
    if found is None:
        return None
    return f"{ast.get_source_segment(source, test) or ast.unparse(test)} ({found} is made only where `{made[found]}`)"
