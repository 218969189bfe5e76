"""What the source says about a line a rank is stuck on: rank-dependent branches, loops, jumps.

Given source text (the probe reads the file; this module never touches the disk).
"""

from __future__ import annotations

import ast
import functools
import re

from triage.core.hang.construction import made_only_under, suppressing_with
from triage.core.hang.iteration import error_exits, error_skips, loop_ends
from triage.core.hang.periods import derived_periods
from triage.core.hang.rank_aliases import aliased_rank_test
from triage.core.hang.rank_exits import ANY_TEST, rank_jumps
from triage.core.hang.stacks import LineContext

# Tests that single out some ranks: `if rank == 0`, `dist.get_rank() != 0`, `is_main_process`,
# nanoGPT's `master_process` and `ddp_rank`, Accelerate's `process_index`, the HF Trainer's
# `is_world_process_zero()`, Lightning's `is_global_zero`, `rank0` ... (`rank` as a part of a
# name between underscores or digits, never inside a word such as "ranking").
RANK_TEST = re.compile(
    r"(?<![a-z])rank(?![a-z])|is_main|is_master|main_process|master_process|process_index|"
    r"process_zero|is_global_zero|is_local_zero",
    re.IGNORECASE,
)
# A blocking call on a c10d key-value store, and the bindings that make a name one.
_STORE_CALL = re.compile(r"([\w.]+)\.(get|wait|multi_get|compare_set|add)\(")
_STORE_MADE = r"(?:\b\w*Store\(|_get_default_store\(\)|\.store\b)"
_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)

# A generator seeded from the clock, on one line: the seeding call, then a clock read in its
# arguments (`random.Random(int(time.time()))`): ranks started apart draw apart (seeds.py).
CLOCK_SEED = re.compile(
    r"\b(?:\w*seed|Random|RandomState|default_rng|Generator)\w*\([^\n]*"
    r"\b(?:time\.(?:time|time_ns|monotonic|perf_counter)|datetime\.(?:now|utcnow)|now)\("
)


def _span(node: ast.AST) -> tuple[int, int]:
    start = getattr(node, "lineno", 0)
    return start, getattr(node, "end_lineno", None) or start


def _contains(node: ast.AST, line: int) -> bool:
    start, end = _span(node)
    return start <= line <= end


def _chain(tree: ast.AST, line: int) -> list[ast.AST]:
    """The nodes enclosing `line`, outermost first."""
    chain: list[ast.AST] = []
    node: ast.AST = tree
    while True:
        inner = next(
            (
                c
                for c in ast.iter_child_nodes(node)
                if isinstance(c, ast.stmt | ast.excepthandler) and _contains(c, line)
            ),
            None,
        )
        if inner is None:
            return chain
        chain.append(inner)
        node = inner


def _in_body(if_node: ast.If, line: int) -> bool:
    """True when `line` is in the branch the test selects (body or orelse, not the test itself)."""
    return any(_contains(stmt, line) for stmt in [*if_node.body, *if_node.orelse])


def _jumps(loop: ast.AST) -> tuple[tuple[int, str], ...]:
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST, guarded: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (*_FUNCTIONS, *_LOOPS)):
                continue  # a jump in a nested loop or function does not leave this loop
            now = guarded or isinstance(child, ast.If | ast.excepthandler)
            if now and isinstance(child, ast.Continue | ast.Break | ast.Return):
                kind = type(child).__name__.lower()
                found.append((child.lineno, kind))
            visit(child, now)

    visit(loop, False)
    return tuple(sorted(found))


def _skips(loop: ast.AST, source: str) -> tuple[tuple[int, str], ...]:
    """The `continue`s of `loop` (not of a loop or function inside it) under an `if`, as (line,
    the innermost `if` test above it)."""
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST, test: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (*_FUNCTIONS, *_LOOPS)):
                continue
            if isinstance(child, ast.Continue) and test is not None:
                found.append((child.lineno, test))
            visit(
                child,
                (ast.get_source_segment(source, child.test) or "") if isinstance(child, ast.If) else test,
            )

    visit(loop, None)
    return tuple(sorted(found))


def _final(chain: list[ast.AST], line: int) -> tuple[int, int, int] | None:
    """The innermost `try` of the line's own function whose `finally` holds `line`, as (try line,
    the `finally` body's first line, the try body's last line)."""
    for node in reversed(chain):
        if isinstance(node, _FUNCTIONS):
            return None
        if isinstance(node, ast.Try) and node.finalbody and any(_contains(s, line) for s in node.finalbody):
            return node.lineno, node.finalbody[0].lineno, _span(node.body[-1])[1]
    return None


def _always_raises(body: list[ast.stmt]) -> bool:
    """Whether a block raises on every path through it: a `raise` at its own level (or in a `with`
    there), or an `if` both of whose branches do. A `raise` under a one-sided `if` (a retry's
    `if attempt == tries: raise`) lets the other path go on."""
    for stmt in body:
        if isinstance(stmt, ast.Raise):
            return True
        if isinstance(stmt, ast.With) and _always_raises(stmt.body):
            return True
        if isinstance(stmt, ast.If) and _always_raises(stmt.body) and _always_raises(stmt.orelse):
            return True
    return False


def _swallowed(chain: list[ast.AST], line: int) -> tuple[int, int, int] | None:
    """The innermost `try` of this function whose body holds `line` and one of whose handlers
    does not always raise again, as (try line, handler line, last line of the statement)."""
    for node in reversed(chain):
        if isinstance(node, _FUNCTIONS):
            return None
        if isinstance(node, ast.Try) and any(_contains(stmt, line) for stmt in node.body):
            quiet = next((h for h in node.handlers if not _always_raises(h.body)), None)
            if quiet is not None:
                return node.lineno, quiet.lineno, _span(node)[1]
    return None


_EXITS = (ast.Return, ast.Raise, ast.Continue, ast.Break)


def _own_function(chain: list[ast.AST]) -> int:
    """Where the line's own function begins in `chain` (the nodes around the line, outermost
    first): the blocks from there on are the function's, not its callers' or the module's."""
    return max((i + 1 for i, n in enumerate(chain) if isinstance(n, _FUNCTIONS)), default=0)


def _guarded_exits(tree: ast.AST, chain: list[ast.AST], source: str) -> list[tuple[int, str, ast.stmt]]:
    """The `if`s earlier in the line's own function, at any level of the blocks around it, whose
    body ends in a `return` (or `raise`, `continue`, `break`): some ranks may leave there before
    reaching the line. As (the `if` line, its test, the exit), innermost first."""
    start = _own_function(chain)
    found: list[tuple[int, str, ast.stmt]] = []
    for container, child in zip([tree, *chain][start:], chain[start:], strict=False):
        for block in ("body", "orelse", "finalbody"):
            statements = getattr(container, block, None)
            if not isinstance(statements, list) or child not in statements:
                continue
            for sibling in statements[: statements.index(child)]:
                if isinstance(sibling, ast.If) and sibling.body and isinstance(sibling.body[-1], _EXITS):
                    found.append(
                        (sibling.lineno, ast.get_source_segment(source, sibling.test) or "", sibling.body[-1])
                    )
    return found[::-1]


def _early_exits(exits: list[tuple[int, str, ast.stmt]]) -> list[tuple[int, str]]:
    """Rank tests that send some ranks away before they reach the line: an `if rank != 0:
    return` (or `raise`, `continue`, `break`). The line runs only where the test is false."""
    return [(line, f"not ({test})") for line, test, _ in exits if RANK_TEST.search(test)]


def _handler(chain: list[ast.AST], source: str) -> tuple[int, str] | None:
    """The innermost `except` clause of the line's own function around it, as (line, header)."""
    for node in reversed(chain):
        if isinstance(node, _FUNCTIONS):
            return None
        if isinstance(node, ast.ExceptHandler):
            caught = ast.get_source_segment(source, node.type) if node.type is not None else None
            return node.lineno, f"except {caught}" if caught else "except"
    return None


def _header(node: ast.AST, source: str) -> str:
    if isinstance(node, ast.If | ast.While):
        return f"{'if' if isinstance(node, ast.If) else 'while'} {ast.get_source_segment(source, node.test) or ''}"
    if isinstance(node, ast.For | ast.AsyncFor):
        target = ast.get_source_segment(source, node.target) or ""
        return f"for {target} in {ast.get_source_segment(source, node.iter) or ''}"
    return ""


def _blocks(chain: list[ast.AST], source: str) -> tuple[tuple[int, int, str], ...]:
    """The `if`s and loops around the line inside its own function, outermost first."""
    start = _own_function(chain)
    return tuple(
        (*_span(n), _header(n, source)) for n in chain[start:] if isinstance(n, (ast.If, ast.While, *_LOOPS))
    )


def _store_call(code: str, source: str) -> str:
    """The store method `code` calls (a blocking get or wait on a key another rank sets), where
    its receiver is named a store or bound to one in `source`: `meta = dist.TCPStore(...)`."""
    found = _STORE_CALL.search(code)
    if found is None:
        return ""
    receiver = found.group(1).rsplit(".", 1)[-1]
    bound = re.search(rf"\b{re.escape(receiver)}\s*(?::[^=\n]*)?=\s*[^\n]*{_STORE_MADE}", source)
    return found.group(2) if "store" in receiver.lower() or bound else ""


def _managed(chain: list[ast.AST], line: int) -> tuple[tuple[int, int, int] | None, bool]:
    """The `with` whose header holds `line` (not its body): (its line, body's first line, body's
    last line), and whether its body has a `return` / `break` / `continue` of its own."""
    node = next((n for n in reversed(chain) if isinstance(n, ast.With | ast.AsyncWith)), None)
    if node is None or not node.body or any(_contains(s, line) for s in node.body):
        return None, False
    jumps = any(isinstance(n, ast.Return | ast.Break | ast.Continue) for s in node.body for n in ast.walk(s))
    return (node.lineno, node.body[0].lineno, _span(node.body[-1])[1]), jumps


# `signal.signal(signal.SIGTERM, handler)`, `signal(SIGUSR1, self.on_usr1)`, asyncio's
# `loop.add_signal_handler(signal.SIGINT, stop)`.
_SIGNAL_SET = re.compile(
    r"\b(?:signal|add_signal_handler)\(\s*(?:signal\.)?(?P<sig>SIG\w+)\s*,\s*(?:[\w.]*\.)?(?P<fn>\w+)"
)


def _signal_handler(source: str, function: str) -> str:
    """The signal `function` is installed for in `source` (as its handler), or ''."""
    return next((m.group("sig") for m in _SIGNAL_SET.finditer(source) if m.group("fn") == function), "")


# `atexit.register(summary.report)` (`@atexit.register` over the `def` is read from the tree), and
# `weakref.finalize(obj, fn)`: `fn` is a finalizer, as a `__del__` is.
_AT_EXIT = re.compile(r"\batexit\.register\(\s*(?:[\w.]*\.)?(?P<fn>\w+)")
_FINALIZE = re.compile(r"\bfinalize\(\s*[^,()]+,\s*(?:[\w.]*\.)?(?P<fn>\w+)")


def _run_by_interpreter(tree: ast.AST, chain: list[ast.AST], source: str, function: str) -> tuple[str, str]:
    """How the interpreter runs `function` on its own ("atexit", "__del__" or ""), and for a
    finalizer the rank test of an `if` (or `x if test else y`) around a call that makes its class."""
    if function == "__del__":
        owner = next((n.name for n in reversed(chain) if isinstance(n, ast.ClassDef)), "")
        for node in ast.walk(tree):
            if not isinstance(node, ast.If | ast.IfExp) or not RANK_TEST.search(ast.unparse(node.test)):
                continue
            body = [*node.body, *node.orelse] if isinstance(node, ast.If) else [node.body, node.orelse]
            calls = (c for part in body for c in ast.walk(part) if isinstance(c, ast.Call))
            if owner and any(ast.unparse(c.func).split(".")[-1] == owner for c in calls):
                return "__del__", ast.get_source_segment(source, node.test) or ast.unparse(node.test)
        return "__del__", ""
    decorated = any(
        isinstance(n, _FUNCTIONS)
        and n.name == function
        and "atexit.register" in map(ast.unparse, n.decorator_list)
        for n in chain
    )
    if any(m.group("fn") == function for m in _FINALIZE.finditer(source)):
        return "__del__", ""
    named = any(m.group("fn") == function for m in _AT_EXIT.finditer(source))
    return ("atexit" if decorated or named else ""), ""


def _drifting(chain: list[ast.AST], line: int) -> tuple[int, ...]:
    """The `if`s around `line` in its own function whose test reads a name that function adds to
    (`count += n`, `self.seen += n`): a running count of the rank's own."""
    start = _own_function(chain)
    function = chain[start - 1] if start else None
    if function is None:
        return ()
    counted = {
        ast.unparse(n.target)
        for n in ast.walk(function)
        if isinstance(n, ast.AugAssign) and isinstance(n.op, ast.Add)
    }
    return tuple(
        n.lineno
        for n in chain[start:]
        if isinstance(n, ast.If)
        and _in_body(n, line)
        and any(
            ast.unparse(x) in counted for x in ast.walk(n.test) if isinstance(x, ast.Name | ast.Attribute)
        )
    )


_MEMO = re.compile(r"(?:^|\.)(?:lru_cache|cache|cached_property|cached)\b")


def _memoised(chain: list[ast.AST]) -> str:
    """The caching decorator of the line's own function (`@functools.lru_cache(maxsize=32)`), or ''."""
    start = _own_function(chain)
    node = chain[start - 1] if start else None
    found = (ast.unparse(d) for d in getattr(node, "decorator_list", ()))
    return next((f"@{d}" for d in found if _MEMO.search(d.split("(", 1)[0])), "")


def _suppresses(chain: list[ast.AST]) -> bool:
    """Whether the line's function is an `__exit__` with a `return` of a true constant."""
    start = _own_function(chain)
    node = chain[start - 1] if start else None
    if not isinstance(node, _FUNCTIONS) or node.name not in ("__exit__", "__aexit__"):
        return False
    return any(
        isinstance(n, ast.Return) and isinstance(n.value, ast.Constant) and bool(n.value.value)
        for n in ast.walk(node)
    )


@functools.lru_cache(maxsize=8)
def _parsed(source: str) -> ast.Module | None:
    """The module's tree, once per source text: eight ranks stuck in one file ask for many lines
    of it. Callers only read the tree."""
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError):
        return None


def line_context(source: str, line: int) -> LineContext:
    """The context of `line` in `source`; an empty context when the source does not parse."""
    tree = _parsed(source)
    if tree is None:
        return LineContext()
    lines = source.splitlines()
    code = lines[line - 1].strip() if 0 < line <= len(lines) else ""
    chain = _chain(tree, line)
    function = next((n.name for n in reversed(chain) if isinstance(n, _FUNCTIONS)), "<module>")
    conditions = []
    own = next((n for n in reversed(chain) if isinstance(n, _FUNCTIONS)), None)
    for node in reversed(chain):
        if isinstance(node, _FUNCTIONS):
            break
        if isinstance(node, ast.If) and _in_body(node, line):
            test = ast.get_source_segment(source, node.test) or ""
            if RANK_TEST.search(test):
                conditions.append((node.lineno, test))
            elif aliased := aliased_rank_test(tree, own, node.test, source, RANK_TEST):
                conditions.append((node.lineno, aliased))
    exits = _guarded_exits(tree, chain, source)
    conditions += _early_exits(exits)
    loop_node = next((n for n in reversed(chain) if isinstance(n, _LOOPS)), None)
    # A loop outside the current function does not count: the frame's own loop decides.
    if loop_node is not None:
        index = chain.index(loop_node)
        if any(isinstance(n, _FUNCTIONS) for n in chain[index + 1 :]):
            loop_node = None
    managed, managed_jumps = _managed(chain, line)
    tests = [n for n in chain[_own_function(chain) :] if isinstance(n, ast.If) and _in_body(n, line)]
    exhausting, endless = loop_ends(tree, chain[_own_function(chain) :])
    hook, made_under = (
        _run_by_interpreter(tree, chain, source, function) if function != "<module>" else ("", "")
    )
    return LineContext(
        function=function,
        code=code,
        rank_condition=conditions[0] if conditions else None,
        rank_conditions=tuple(conditions),
        loop=_span(loop_node) if loop_node is not None else None,
        jumps=_jumps(loop_node) if loop_node is not None else (),
        swallowed=_swallowed(chain, line),
        blocks=_blocks(chain, source),
        handler=_handler(chain, source),
        returns=tuple((line, test) for line, test, node in exits if isinstance(node, ast.Return)),
        skips=_skips(loop_node, source) if loop_node is not None else (),
        final=_final(chain, line),
        store_call=_store_call(code, source),
        managed=managed,
        managed_jumps=managed_jumps,
        suppresses=_suppresses(chain),
        signal_handler=_signal_handler(source, function) if function != "<module>" else "",
        drifting=_drifting(chain, line),
        exit_hook=hook,
        made_under=made_under,
        exhausting=exhausting,
        endless=endless,
        memoised=_memoised(chain),
        made_if=made_only_under(tree, chain, source),
        raises=tuple((line, test) for line, test, node in exits if isinstance(node, ast.Raise)),
        suppressed=suppressing_with(chain),
        rank_jumps=rank_jumps(chain, source, RANK_TEST),
        guarded_jumps=rank_jumps(chain, source, ANY_TEST),
        error_exits=error_exits(chain[_own_function(chain) :]),
        error_skips=error_skips(chain[_own_function(chain) :]),
        derived_periods=derived_periods(own, tests),
        length_periods=derived_periods(own, tests, from_length=True),
        clock_seeded=CLOCK_SEED.search(source) is not None,
    )
