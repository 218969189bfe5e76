"""The gate of every statement of a script: the innermost rank condition it runs under.

The body of `if rank == 0:`, its `else`, the rest of a block after `if rank != 0: return`, a
`@rank_zero_only` function, and a function of the file that is only ever called under one gate.
Which ranks a condition holds on is the rank model's to say (`RankConditions`).
"""

from __future__ import annotations

import ast
from typing import Protocol

from triage.core.lint.rank_terms import Gate, Side, main_decorator, negate
from triage.core.lint.script import Scope, Script, dotted

EXITS = frozenset({"exit", "_exit", "quit"})


class RankConditions(Protocol):
    """What the gates need from the rank model."""

    def side(self, test: ast.AST, scope: Scope) -> Side | None: ...

    def negatable(self, test: ast.AST, scope: Scope) -> bool: ...


class RankGates:
    """The gate of every statement of one script, and of the functions only called under one."""

    def __init__(self, script: Script, conditions: RankConditions) -> None:
        self.script = script
        self.side = conditions.side
        self.negatable = conditions.negatable
        self.gates: dict[ast.stmt, Gate] = {}
        self._walk_scopes()
        self.function_gates = self._function_gates()

    def _walk_scopes(self) -> None:
        self._walk(self.script.tree.body, None, self.script.tree)
        for defs in self.script.functions.values():
            for function in defs:
                gate = None
                for decorator in function.decorator_list:
                    target = decorator.func if isinstance(decorator, ast.Call) else decorator
                    name = (self.script.qual(target) or "").rsplit(".", 1)[-1]
                    if main_decorator(name):
                        gate = Gate("zero", function.lineno, f"in `{function.name}`, decorated `@{name}`")
                self._walk(function.body, gate, function)

    def _walk(self, body: list[ast.stmt], gate: Gate | None, scope: Scope) -> None:
        current = gate
        for stmt in body:
            if current is not None:
                self.gates[stmt] = current
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                if isinstance(stmt, ast.ClassDef):
                    self._walk(stmt.body, current, scope)
                continue
            if isinstance(stmt, ast.If):
                side = self.side(stmt.test, scope)
                if side is None:
                    self._walk(stmt.body, current, scope)
                    self._walk(stmt.orelse, current, scope)
                    staying = self._staying_side(stmt, scope)
                    if staying is not None:
                        current = self._combine(current, staying)
                    continue
                test = self.script.text(stmt.test, 50)
                inside = Gate(side, stmt.lineno, f"inside `if {test}:` at line {stmt.lineno}")
                self._walk(stmt.body, self._combine(current, inside), scope)
                if not self.negatable(stmt.test, scope):
                    self._walk(stmt.orelse, current, scope)
                    continue
                other = Gate(
                    negate(side), stmt.lineno, f"in the `else` of `if {test}:` at line {stmt.lineno}"
                )
                self._walk(stmt.orelse, self._combine(current, other), scope)
                exit_word = exit_word_of(stmt.body)
                # `if rank not in grid: raise` is a precondition: the ranks past it are the ones that
                # did not fail, not a subset that skips what follows.
                if exit_word and exit_word != "raise" and not stmt.orelse:
                    current = self._combine(
                        current,
                        Gate(
                            negate(side), stmt.lineno, f"after `if {test}: {exit_word}` at line {stmt.lineno}"
                        ),
                    )
                continue
            for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                children = getattr(stmt, field, None)
                if not children:
                    continue
                for child in children:
                    if isinstance(child, ast.ExceptHandler | ast.match_case):
                        self._walk(child.body, current, scope)
                if isinstance(children[0], ast.stmt):
                    self._walk(children, current, scope)

    def _staying_side(self, stmt: ast.If, scope: Scope) -> Gate | None:
        """The ranks that get past `if cond or not (is_main and wanted): return` when the test as a
        whole holds on no rank subset: those where every disjunct is false, so where `is_main and
        wanted` holds (sparseml's validation set, made on the main process only)."""
        exit_word = exit_word_of(stmt.body)
        if not exit_word or exit_word == "raise" or stmt.orelse:
            return None
        terms = (
            stmt.test.values if isinstance(stmt.test, ast.BoolOp) and isinstance(stmt.test.op, ast.Or) else []
        )
        sides: set[Side] = set()
        for term in terms if terms else [stmt.test]:
            if isinstance(term, ast.UnaryOp) and isinstance(term.op, ast.Not):
                kept = self.side(term.operand, scope)  # false past the exit: its operand holds
            else:
                found = self.side(term, scope)
                kept = negate(found) if found and self.negatable(term, scope) else None
            if kept is not None:
                sides.add(kept)
        if len(sides) != 1 or "other" in sides:
            return None
        test = self.script.text(stmt.test, 50)
        return Gate(sides.pop(), stmt.lineno, f"after `if {test}: {exit_word}` at line {stmt.lineno}")

    @staticmethod
    def _combine(outer: Gate | None, inner: Gate) -> Gate:
        if outer is None or outer.side == inner.side or inner.side == "other":
            return inner
        return Gate(outer.side if outer.side != "other" else inner.side, inner.line, inner.where)

    def gate(self, node: ast.AST) -> Gate | None:
        """The rank gate `node` runs under in its own function (None: every rank runs it)."""
        stmt = self.script.statement_of(node)
        return self.gates.get(stmt) if stmt is not None else None

    def _function_gates(self) -> dict[str, Gate]:
        """Functions of this file that are only ever called under a gate (one level of calls)."""
        sites: dict[str, list[Gate | None]] = {}
        for call in self.script.call_list:
            local = self.script.local_function(call.node)
            if local is not None:
                sites.setdefault(local.name, []).append(self.gate(call.node))
        found = {}
        for name, gates in sites.items():
            first = gates[0]
            if first is not None and all(g is not None and g.side == first.side for g in gates):
                found[name] = Gate(first.side, first.line, f"{first.where}, where `{name}()` is called")
        return found

    def effective_gate(self, node: ast.AST) -> Gate | None:
        """The gate of `node`, or of its function when that function is only called under one."""
        own = self.gate(node)
        if own is not None:
            return own
        for scope in self.script.ancestors(node):
            if isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
                return self.function_gates.get(scope.name)
        return None


def exit_word_of(body: list[ast.stmt]) -> str:
    """`return`, `continue`, ... when a block always leaves (so what follows runs on the others)."""
    if not body:
        return ""
    last = body[-1]
    words = {ast.Return: "return", ast.Continue: "continue", ast.Break: "break", ast.Raise: "raise"}
    for kind, word in words.items():
        if isinstance(last, kind):
            return word
    if isinstance(last, ast.Expr) and isinstance(last.value, ast.Call):
        name = dotted(last.value.func).rsplit(".", 1)[-1]
        if name in EXITS:
            return f"{name}()"
    return ""
