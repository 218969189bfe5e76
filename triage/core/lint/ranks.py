"""Which values are ranks, which conditions hold on some ranks only, and what runs under them.

A rank value is followed through names (`rank = dist.get_rank()`,
`local_rank = int(os.environ["LOCAL_RANK"])`, `args.rank`, a helper `def get_rank(): return
dist.get_rank()`), and a rank condition through names too (`is_main = rank == 0`,
`accelerator.is_main_process`, `trainer.is_global_zero`, `local_rank in (-1, 0)`). Comparisons
with -1 test "is this a distributed run at all" and hold on every rank alike, so they gate nothing.

A gate is the innermost rank condition a statement runs under: the body of `if rank == 0:`, its
`else`, the rest of a block after `if rank != 0: return`, or a `@rank_zero_only` function.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Literal, cast

from triage.core import launchers
from triage.core.lint.script import FunctionNode, Scope, Script, const_int, dotted

Side = Literal["zero", "nonzero", "other"]
RankKind = Literal["global", "local"]

GLOBAL_RANK_NAMES = frozenset(
    {"rank", "global_rank", "world_rank", "ddp_rank", "process_rank", "proc_rank", "my_rank", "process_index"}
)
LOCAL_RANK_NAMES = frozenset(
    {"local_rank", "ddp_local_rank", "local_process_index", "lrank", "local_gpu_rank"}
)
_RANK_CALLS: dict[str, RankKind] = {
    "get_rank": "global",
    "get_global_rank": "global",
    "get_ordinal": "global",
    "get_local_rank": "local",
    "get_local_ordinal": "local",
    "get_node_local_rank": "local",
}
_RANK_ENV: dict[str, RankKind] = {
    **dict.fromkeys(launchers.RANK, "global"),
    **dict.fromkeys(launchers.LOCAL_RANK, "local"),
}
# Names, attributes and calls that mean "this is the main process".
MAIN_NAMES = frozenset(
    {
        "is_main_process",
        "is_local_main_process",
        "is_global_zero",
        "is_master",
        "master_process",
        "is_main",
        "main_process",
        "is_rank_zero",
        "is_rank0",
        "is_master_process",
        "is_main_rank",
        "is_world_process_zero",
        "is_local_process_zero",
        "is_master_ordinal",
        "is_primary",
        "is_rank_0",
        "is_chief",
    }
)
MAIN_DECORATORS = frozenset(
    {"rank_zero_only", "main_process_only", "on_main_process", "on_local_main_process"}
)
_EXITS = frozenset({"exit", "_exit", "quit"})


@dataclass(frozen=True)
class Gate:
    """The rank condition a statement runs under, and how to say where it is."""

    side: Side
    line: int
    where: str  # "inside `if rank == 0:` at line 40"

    @property
    def who(self) -> str:
        return {"zero": "rank 0", "nonzero": "the ranks other than 0", "other": "some ranks"}[self.side]


def negate(side: Side) -> Side:
    """The other side of a rank condition."""
    return {"zero": "nonzero", "nonzero": "zero", "other": "other"}[side]  # type: ignore[return-value]


def _flip(op: ast.cmpop) -> ast.cmpop:
    flips: dict[type[ast.cmpop], ast.cmpop] = {
        ast.Lt: ast.Gt(),
        ast.Gt: ast.Lt(),
        ast.LtE: ast.GtE(),
        ast.GtE: ast.LtE(),
    }
    return flips.get(type(op), op)


def _compare_side(op: ast.cmpop, value: int) -> Side | None:
    """Which ranks satisfy `rank <op> value` in a distributed run (ranks are 0..N-1)."""
    if isinstance(op, ast.Eq):
        return "zero" if value == 0 else None if value < 0 else "other"
    if isinstance(op, ast.NotEq):
        return "nonzero" if value == 0 else None if value < 0 else "other"
    if isinstance(op, ast.Gt):
        return None if value < 0 else "nonzero" if value == 0 else "other"
    if isinstance(op, ast.GtE):
        return None if value <= 0 else "nonzero" if value == 1 else "other"
    if isinstance(op, ast.Lt):
        return None if value <= 0 else "zero" if value == 1 else "other"
    if isinstance(op, ast.LtE):
        return None if value < 0 else "zero" if value == 0 else "other"
    return None


class RankModel:
    """Rank values, rank conditions and the gate of every statement of one script."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.values: dict[Scope, dict[str, str]] = {}  # name -> RankKind
        self.preds: dict[Scope, dict[str, str]] = {}  # name -> Side
        self.rank_functions: dict[str, RankKind] = {}
        self.pred_functions: dict[str, Side] = {}
        self.spawn_targets: dict[str, FunctionNode] = self._spawn_targets()
        self.launcher_functions = self._launcher_functions()
        self.param_kinds: dict[tuple[ast.AST, str], RankKind] = {}
        for _ in range(3):  # names built from names built from helpers: a few rounds settle it
            self._collect_names()
            self._collect_functions()
            self._collect_params()
        self.gates: dict[ast.stmt, Gate] = {}
        self._walk_scopes()
        self.function_gates = self._function_gates()

    # -- rank values -----------------------------------------------------------------------

    def _lookup(self, table: dict[Scope, dict[str, str]], name: str, scope: Scope) -> str | None:
        current: Scope | None = scope
        while current is not None:
            found = table.get(current, {}).get(name)
            if found is not None:
                return found
            current = None if isinstance(current, ast.Module) else self.script.scope_of(current)
        return None

    def rank_kind(self, expr: ast.AST, scope: Scope) -> RankKind | None:
        """'global' or 'local' when `expr` is a process's rank, else None."""
        script = self.script
        if isinstance(expr, ast.Call):
            callee = script.qual(expr.func) or ""
            tail = callee.rsplit(".", 1)[-1]
            if tail in ("int", "str") and expr.args:
                return self.rank_kind(expr.args[0], scope)
            if tail in _RANK_CALLS:
                return _RANK_CALLS[tail]
            if tail in ("rank", "local_rank") and callee.startswith("horovod"):
                return "global" if tail == "rank" else "local"
            local = script.local_function(expr)
            if local is not None and local.name in self.rank_functions:
                return self.rank_functions[local.name]
            return self._env_kind(expr, callee)
        if isinstance(expr, ast.Subscript) and dotted(expr.value).endswith("environ"):
            key = expr.slice
            return (
                _RANK_ENV.get(key.value)
                if isinstance(key, ast.Constant) and isinstance(key.value, str)
                else None
            )
        if isinstance(expr, ast.Name):
            found = self._lookup(self.values, expr.id, scope)
            if found is not None:
                return cast(RankKind, found)
            passed = self.param_kinds.get((scope, expr.id))
            if passed is not None:
                return passed
            if self._spawned_index(expr.id, scope):
                return "local"
            return self._by_name(expr.id)
        if isinstance(expr, ast.Attribute):
            found = self._lookup(self.values, dotted(expr), self.script.tree)
            return cast(RankKind, found) if found is not None else self._by_name(expr.attr)
        if (
            isinstance(expr, ast.BinOp)
            and isinstance(expr.op, ast.Add | ast.Mult)
            and (self.rank_kind(expr.left, scope) or self.rank_kind(expr.right, scope))
        ):
            return "global"  # node_rank * gpus_per_node + local_rank
        if isinstance(expr, ast.IfExp):
            return self.rank_kind(expr.body, scope) or self.rank_kind(expr.orelse, scope)
        if isinstance(expr, ast.NamedExpr):
            return self.rank_kind(expr.value, scope)
        return None

    @staticmethod
    def _by_name(name: str) -> RankKind | None:
        if name in LOCAL_RANK_NAMES:
            return "local"
        return "global" if name in GLOBAL_RANK_NAMES else None

    @staticmethod
    def _env_kind(call: ast.Call, callee: str) -> RankKind | None:
        if not (callee.endswith("environ.get") or callee.endswith("getenv")) or not call.args:
            return None
        key = call.args[0]
        return (
            _RANK_ENV.get(key.value) if isinstance(key, ast.Constant) and isinstance(key.value, str) else None
        )

    def _spawned_index(self, name: str, scope: Scope) -> bool:
        """The first parameter of a function started by mp.spawn is its local process index."""
        if not isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
            return False
        if self.spawn_targets.get(scope.name) is not scope:
            return False
        params = scope.args.posonlyargs + scope.args.args
        return bool(params) and params[0].arg == name

    # -- rank conditions -------------------------------------------------------------------

    def side(self, test: ast.AST, scope: Scope) -> Side | None:
        """Which ranks a condition holds on: only rank 0, only the others, some; None: all alike."""
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            inner = self.side(test.operand, scope)
            return negate(inner) if inner and self.negatable(test.operand, scope) else None
        if isinstance(test, ast.BoolOp):
            sides = {s for s in (self.side(v, scope) for v in test.values) if s}
            if not sides:
                return None
            if isinstance(test.op, ast.Or) and {"zero", "nonzero"} <= sides:
                return None
            return sides.pop() if len(sides) == 1 else "zero" if "zero" in sides else "other"
        if isinstance(test, ast.Compare):
            return self._compare(test, scope)
        if isinstance(test, ast.Name | ast.Attribute | ast.Call) and self.rank_kind(test, scope):
            return "nonzero"  # `if rank:` holds on every rank but 0
        if isinstance(test, ast.Name):
            found = self._lookup(self.preds, test.id, scope)
            if found is not None:
                return cast(Side, found)
            return "zero" if test.id in MAIN_NAMES else None
        if isinstance(test, ast.Attribute):
            found = self._lookup(self.preds, dotted(test), self.script.tree)
            if found is not None:
                return cast(Side, found)
            return "zero" if test.attr in MAIN_NAMES else None
        if isinstance(test, ast.Call):
            local = self.script.local_function(test)
            if local is not None and local.name in self.pred_functions:
                return self.pred_functions[local.name]
            callee = self.script.qual(test.func) or ""
            return "zero" if callee.rsplit(".", 1)[-1] in MAIN_NAMES else None
        if isinstance(test, ast.NamedExpr):
            return self.side(test.value, scope)
        return None

    def negatable(self, test: ast.AST, scope: Scope) -> bool:
        """Whether `not test` holds on some ranks only too, so an `else`, or the code after
        `if test: return`, is gated. `is_main and step % 10 == 0` is not: its negation holds on
        every rank at most steps."""
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return self.side(test.operand, scope) is not None
        if isinstance(test, ast.NamedExpr):
            return self.negatable(test.value, scope)
        if isinstance(test, ast.BoolOp):
            ranked = [v for v in test.values if self.side(v, scope) is not None]
            if isinstance(test.op, ast.And) and len(ranked) != len(test.values):
                return False
            return all(self.negatable(v, scope) for v in ranked)
        return self.side(test, scope) is not None

    def _compare(self, test: ast.Compare, scope: Scope) -> Side | None:
        if len(test.ops) != 1:
            chained = [self.rank_kind(e, scope) for e in (test.left, *test.comparators)]
            return "other" if any(chained) else None
        op, left, right = test.ops[0], test.left, test.comparators[0]
        if not self._is_rankish(left, scope):
            if not self._is_rankish(right, scope):
                return None
            left, right, op = right, left, _flip(op)
        if isinstance(op, ast.In | ast.NotIn) and isinstance(right, ast.Tuple | ast.List | ast.Set):
            values = {const_int(e) for e in right.elts}
            if None in values:
                return "other"
            chosen = {v for v in values if v is not None and v >= 0}
            if not chosen:
                return None
            if chosen == {0}:
                return "zero" if isinstance(op, ast.In) else "nonzero"
            return "other"
        value = const_int(right)
        if value is None:
            return "other" if isinstance(op, ast.Eq | ast.NotEq) else None
        return _compare_side(op, value)

    def _is_rankish(self, expr: ast.AST, scope: Scope) -> bool:
        """A rank, or a rank remapped by `%` / `//` (`rank % gpus_per_node == 0`: node-local zero)."""
        if self.rank_kind(expr, scope):
            return True
        return (
            isinstance(expr, ast.BinOp)
            and isinstance(expr.op, ast.Mod)
            and bool(self.rank_kind(expr.left, scope))
        )

    # -- collecting names and helpers ------------------------------------------------------

    def _collect_names(self) -> None:
        script = self.script
        bindings: list[ast.Assign | ast.AnnAssign | ast.NamedExpr] = [
            *script.of_type(ast.Assign),
            *script.of_type(ast.AnnAssign),
            *script.of_type(ast.NamedExpr),
        ]
        for node in bindings:
            if isinstance(node, ast.Assign):
                value, targets = node.value, node.targets
            elif node.value is not None:
                value, targets = node.value, [node.target]
            else:
                continue
            scope = self.script.scope_of(node)
            for target in targets:
                if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple):
                    for sub_target, sub_value in zip(target.elts, value.elts, strict=False):
                        self._bind(sub_target, sub_value, scope)
                elif isinstance(target, ast.Tuple) and target.elts and isinstance(value, ast.Call):
                    callee = self.script.qual(value.func) or ""
                    if callee.endswith("get_dist_info"):  # mmcv/mmengine: rank, world_size = get_dist_info()
                        self._store(self.values, target.elts[0], "global", scope)
                else:
                    self._bind(target, value, scope)

    def _bind(self, target: ast.AST, value: ast.AST, scope: Scope) -> None:
        kind = self.rank_kind(value, scope)
        if kind is not None:
            self._store(self.values, target, kind, scope)
            return
        side = self.side(value, scope)
        if side is not None:
            self._store(self.preds, target, side, scope)

    def _store(self, table: dict[Scope, dict[str, str]], target: ast.AST, value: str, scope: Scope) -> None:
        if isinstance(target, ast.Name):
            table.setdefault(scope, {})[target.id] = value
        elif isinstance(target, ast.Attribute) and dotted(target):
            table.setdefault(self.script.tree, {})[dotted(target)] = value

    def _collect_functions(self) -> None:
        returns: dict[ast.AST, list[ast.Return]] = {}
        for node in self.script.of_type(ast.Return):
            returns.setdefault(self.script.scope_of(node), []).append(node)
        for name, defs in self.script.functions.items():
            function = defs[0]
            for node in returns.get(function, []):
                if node.value is not None:
                    kind = self.rank_kind(node.value, function)
                    if kind is not None:
                        self.rank_functions[name] = kind
                        break
                    side = self.side(node.value, function)
                    if side is not None:
                        self.pred_functions[name] = side
                        break

    def _collect_params(self) -> None:
        """A parameter that every call in this file passes the same kind of rank is that kind:
        `ddp_setup(rank, ...)` called from an mp.spawn worker with its local index."""
        seen: dict[tuple[ast.AST, str], set[RankKind | None]] = {}
        for call in self.script.call_list:
            function = self.script.local_function(call.node)
            if function is None:
                continue
            params = [a.arg for a in function.args.posonlyargs + function.args.args]
            if params and params[0] in ("self", "cls") and isinstance(call.node.func, ast.Attribute):
                params = params[1:]
            pairs = list(zip(params, call.node.args, strict=False))
            pairs += [(k.arg, k.value) for k in call.node.keywords if k.arg in params]
            for param, arg in pairs:
                seen.setdefault((function, param), set()).add(self.rank_kind(arg, call.scope))
        for key, kinds in seen.items():
            if len(kinds) == 1 and None not in kinds:
                self.param_kinds[key] = kinds.pop()  # type: ignore[assignment]

    # -- processes -------------------------------------------------------------------------

    def _spawn_targets(self) -> dict[str, FunctionNode]:
        targets: dict[str, FunctionNode] = {}
        for call in self.script.calls("spawn", "start_processes", "Process", "notebook_launcher"):
            if not (
                call.name.startswith(("torch.multiprocessing", "multiprocessing", "torch_xla"))
                or call.tail == "notebook_launcher"
            ):
                continue
            fn = call.kwarg("target") or call.kwarg("fn") or call.kwarg("function")
            if fn is None and call.node.args:
                fn = call.node.args[0]
            if isinstance(fn, ast.Name) and fn.id in self.script.functions:
                targets[fn.id] = self.script.functions[fn.id][0]
        return targets

    def _launcher_functions(self) -> set[ast.AST]:
        """With mp.spawn, the code that starts the workers runs once, not once per rank."""
        if not self.spawn_targets:
            return set()
        per_rank: set[str] = set()
        todo = list(self.spawn_targets)
        while todo:
            name = todo.pop()
            if name in per_rank or name not in self.script.functions:
                continue
            per_rank.add(name)
            for node in ast.walk(self.script.functions[name][0]):
                if isinstance(node, ast.Call):
                    local = self.script.local_function(node)
                    if local is not None:
                        todo.append(local.name)
        launchers: set[ast.AST] = {self.script.tree}
        for name, defs in self.script.functions.items():
            if name not in per_rank:
                launchers.update(defs)
        return launchers

    def per_rank(self, node: ast.AST) -> bool:
        """Whether this code runs in every rank's process (not in an mp.spawn parent)."""
        if not self.launcher_functions:
            return True
        for scope in (node, *self.script.ancestors(node)):
            if isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef) and scope.name in self.spawn_targets:
                return True
            if (
                isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef | ast.Module)
                and scope not in self.launcher_functions
            ):
                return True
        return False

    # -- gates -----------------------------------------------------------------------------

    def _walk_scopes(self) -> None:
        self._walk(self.script.tree.body, None, self.script.tree)
        for defs in self.script.functions.values():
            for function in defs:
                gate = None
                for decorator in function.decorator_list:
                    target = decorator.func if isinstance(decorator, ast.Call) else decorator
                    name = (self.script.qual(target) or "").rsplit(".", 1)[-1]
                    if name in MAIN_DECORATORS:
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
                exit_word = _exit_word(stmt.body)
                if exit_word and not stmt.orelse:
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


def _exit_word(body: list[ast.stmt]) -> str:
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
        if name in _EXITS:
            return f"{name}()"
    return ""
