"""How a loop ends, read from the source when its header does not say.

- A `while True:` that pulls batches by hand (`batch = next(it)`) ends when the iterator runs
  out: its `break` (or `return`) sits in an `except StopIteration:` clause, or under an
  `if batch is None:` test on a name bound by `next(it, None)`. It is a loop over the data: a
  rank out of it first ran out of batches (D9), whatever the loop's header says.
- A `for` over an iterable that never runs out (`itertools.count()`, `cycle(loader)`, a generator
  function of the same source whose body is a `while True:` it never leaves) runs until a `break`:
  as a counting loop, a rank out of it early left on a decision of its own (D19), not at the end
  of its data.
- A loop that a broad `except` clause leaves (`except Exception: break`, a bare `except:` that
  returns) is also left by a rank whose step raised: a crash swallowed there (a DataLoader worker
  killed, a corrupt record) ends that rank's loop early while the others go on (loop_exits.py).
"""

from __future__ import annotations

import ast

_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
# Calls that hand on their argument's items one by one: the loop ends when that argument ends.
_WRAPPERS = frozenset({"enumerate", "iter", "tqdm", "trange", "chain"})
# itertools' iterators that never end (repeat only without its `times`).
_ENDLESS_CALLS = frozenset({"count", "cycle", "repeat"})


def _own(node: ast.AST) -> list[ast.AST]:
    """The nodes inside `node` that belong to it, not to a function or class defined in it."""
    found: list[ast.AST] = []
    todo = list(ast.iter_child_nodes(node))
    while todo:
        child = todo.pop()
        if isinstance(child, (*_FUNCTIONS, ast.ClassDef, ast.Lambda)):
            continue
        found.append(child)
        todo.extend(ast.iter_child_nodes(child))
    return found


def _leaves(loop: ast.AST) -> list[ast.stmt]:
    """The `break`s of `loop` itself (not of a loop inside it) and its `return`s."""
    found: list[ast.stmt] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (*_FUNCTIONS, ast.ClassDef, ast.Lambda)):
                continue
            if isinstance(child, ast.Break | ast.Return):
                found.append(child)
            if isinstance(child, _LOOPS):  # its `break`s leave that loop only
                found.extend(n for n in _own(child) if isinstance(n, ast.Return))
            else:
                visit(child)

    visit(loop)
    return found


def _name(node: ast.AST) -> str:
    """`f` for `f(...)`, `self.f(...)`, `itertools.f(...)`; '' for anything else."""
    func = node.func if isinstance(node, ast.Call) else None
    if isinstance(func, ast.Name):
        return func.id
    return func.attr if isinstance(func, ast.Attribute) else ""


def _ends_on_stop_iteration(loop: ast.While) -> bool:
    """Whether a `while` loop is left where the iterator it pulls from by hand runs out."""
    leaves = {id(n) for n in _leaves(loop)}
    sentinels = {
        t.id
        for n in _own(loop)
        if isinstance(n, ast.Assign) and _name(n.value) == "next" and len(getattr(n.value, "args", ())) == 2
        for t in n.targets
        if isinstance(t, ast.Name)
    }
    for node in _own(loop):
        if isinstance(node, ast.ExceptHandler) and node.type is not None:
            caught = {ast.unparse(t).rsplit(".", 1)[-1] for t in ast.walk(node.type)}
            if "StopIteration" in caught and any(id(n) in leaves for n in ast.walk(node)):
                return True
        if isinstance(node, ast.If) and any(id(n) in leaves for s in node.body for n in ast.walk(s)):
            test = node.test
            if (
                isinstance(test, ast.Compare)
                and isinstance(test.left, ast.Name)
                and test.left.id in sentinels
                and isinstance(test.ops[0], ast.Is)
            ):
                return True
    return False


def _endless_generators(tree: ast.AST) -> frozenset[str]:
    """The generator functions of `tree` that never end: a `yield` inside a `while True:` that
    has no `break`, and no `return` anywhere in the function."""
    found = set()
    for node in ast.walk(tree):
        if not isinstance(node, _FUNCTIONS):
            continue
        mine = _own(node)
        if any(isinstance(n, ast.Return) for n in mine):
            continue
        for loop in (n for n in mine if isinstance(n, ast.While)):
            always = isinstance(loop.test, ast.Constant) and bool(loop.test.value)
            yields = any(isinstance(n, ast.Yield | ast.YieldFrom) for n in _own(loop))
            if always and yields and not any(isinstance(n, ast.Break) for n in _leaves(loop)):
                found.add(node.name)
    return frozenset(found)


def _never_ends(iterable: ast.AST, generators: frozenset[str]) -> bool:
    while isinstance(iterable, ast.Call) and _name(iterable) in _WRAPPERS and iterable.args:
        if _name(iterable) == "chain" and len(iterable.args) > 1:
            iterable = iterable.args[-1]
        else:
            iterable = iterable.args[0]
    name = _name(iterable)
    if name == "repeat" and isinstance(iterable, ast.Call):
        return len(iterable.args) < 2 and not iterable.keywords
    return name in _ENDLESS_CALLS or name in generators


def loop_ends(tree: ast.AST, blocks: list[ast.AST]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Of the loops among `blocks` (those around a line in its own function), the first lines of
    those that end when an iterator pulled by hand runs out, and of those that never run out."""
    generators = _endless_generators(tree)
    exhausting = tuple(n.lineno for n in blocks if isinstance(n, ast.While) and _ends_on_stop_iteration(n))
    endless = tuple(
        n.lineno for n in blocks if isinstance(n, ast.For | ast.AsyncFor) and _never_ends(n.iter, generators)
    )
    return exhausting, endless


# What a broad `except` catches: a crash of any kind, not the end of an iterator
# (`StopIteration`) or an interrupt from the keyboard.
_BROAD = frozenset({"Exception", "BaseException", "RuntimeError", "OSError", "IOError", "EnvironmentError"})


def _broad(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    return any(ast.unparse(n).rsplit(".", 1)[-1] in _BROAD for n in ast.walk(handler.type))


def error_exits(blocks: list[ast.AST]) -> tuple[tuple[int, int, str], ...]:
    """Of the loops among `blocks`, those a broad `except` clause leaves through a `break` or a
    `return` of its own: (the loop's first line, the clause's line, the clause's header)."""
    found: list[tuple[int, int, str]] = []
    for loop in (n for n in blocks if isinstance(n, _LOOPS)):
        leaves = {id(n) for n in _leaves(loop)}
        for node in _own(loop):
            if not isinstance(node, ast.ExceptHandler) or not _broad(node):
                continue
            if any(id(n) in leaves for n in ast.walk(node)):
                clause = "except" + (f" {ast.unparse(node.type)}" if node.type is not None else "")
                found.append((loop.lineno, node.lineno, clause))
    return tuple(sorted(found))


def _goes_on(loop: ast.AST, node: ast.Try, handler: ast.ExceptHandler) -> bool:
    """Whether the loop goes round again after `handler`: it ends in a `continue`, or the `try` is
    the last statement of the loop's body."""
    last = handler.body[-1] if handler.body else None
    body = getattr(loop, "body", [])
    ends_loop = bool(body) and body[-1] is node
    return isinstance(last, ast.Continue) or (
        ends_loop and not isinstance(last, ast.Break | ast.Return | ast.Raise)
    )


def error_skips(blocks: list[ast.AST]) -> tuple[tuple[int, int, int, str], ...]:
    """Of the loops among `blocks`, the `try`s of their own whose broad `except` swallows the
    error and goes on to the next iteration (`except Exception: log; continue`): (the loop's first
    line, the `try` line, its body's last line, the clause's header)."""
    found: list[tuple[int, int, int, str]] = []
    for loop in (n for n in blocks if isinstance(n, _LOOPS)):
        for node in _own(loop):
            if not isinstance(node, ast.Try) or not node.body:
                continue
            for handler in (h for h in node.handlers if _broad(h) and _goes_on(loop, node, h)):
                clause = "except" + (f" {ast.unparse(handler.type)}" if handler.type is not None else "")
                end = getattr(node.body[-1], "end_lineno", None) or node.body[-1].lineno
                found.append((loop.lineno, node.lineno, end, clause))
                break
    return tuple(sorted(found))
