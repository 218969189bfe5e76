"""Which values are ranks, which conditions hold on some ranks only, and what runs under them.

A rank value is followed through names (`rank = dist.get_rank()`,
`local_rank = int(os.environ["LOCAL_RANK"])`, `args.rank`, a helper `def get_rank(): return
dist.get_rank()`), and a rank condition through names too (`is_main = rank == 0`,
`accelerator.is_main_process`, `trainer.is_global_zero`, `local_rank in (-1, 0)`). Comparisons
with -1 test "is this a distributed run at all" and hold on every rank alike, so they gate nothing.

The words of ranks are in `rank_terms`, how names, helpers and flags are collected in `rank_names`, the gates statements run under in `rank_gates`, and which
code runs per rank at all (mp.spawn) in `rank_processes`; `RankModel` is what a check asks.
"""

from __future__ import annotations

import ast
from typing import cast

from triage.core.lint.rank_gates import RankGates
from triage.core.lint.rank_names import RankNames
from triage.core.lint.rank_processes import RankProcesses
from triage.core.lint.rank_terms import (
    GLOBAL_RANK_NAMES,
    LOCAL_RANK_NAMES,
    MAIN_NAMES,
    RANK_CALLS,
    RANK_ENV,
    Gate,
    RankKind,
    Side,
    compare_side,
    flip,
    main_decorator,
    negate,
    writer_parameter_side,
)
from triage.core.lint.script import Scope, Script, const_int, dotted

__all__ = ["Gate", "RankKind", "RankModel", "Side", "negate"]


class RankModel(RankNames):
    """Rank values, rank conditions and the gate of every statement of one script."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.values: dict[Scope, dict[str, str]] = {}  # name -> RankKind
        self.preds: dict[Scope, dict[str, str]] = {}  # name -> Side
        self.rank_functions: dict[str, RankKind] = {}
        self.pred_functions: dict[str, Side] = {}
        self.processes = RankProcesses(script)
        self.param_kinds: dict[tuple[ast.AST, str], RankKind] = {}
        for _ in range(3):  # names built from names built from helpers: a few rounds settle it
            self._collect_names()
            self._collect_functions()
            self._collect_params()
        self.gates = RankGates(script, self)
        if self._collect_flags():
            self.gates = RankGates(script, self)

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
            if tail in RANK_CALLS:
                return RANK_CALLS[tail]
            if tail in ("rank", "local_rank") and callee.startswith("horovod"):
                return "global" if tail == "rank" else "local"
            if tail == "rank" and isinstance(expr.func, ast.Attribute) and not expr.args:
                return "global"  # a process group's rank: `self.data_parallel_group.rank()`
            local = script.local_function(expr)
            if local is not None and local.name in self.rank_functions:
                return self.rank_functions[local.name]
            return self._env_kind(expr, callee)
        if isinstance(expr, ast.Subscript) and dotted(expr.value).endswith("environ"):
            key = expr.slice
            return (
                RANK_ENV.get(key.value)
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
            if self.processes.spawned_index(expr.id, scope):
                return "local"
            kind = self._by_name(expr.id)
            if kind == "global" and (scope, expr.id) in self.processes.passed_elsewhere:
                return "local"
            return kind
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
        name = name.lower() if name.isupper() else name  # OpenPCDet's `cfg.LOCAL_RANK`
        if name in LOCAL_RANK_NAMES:
            return "local"
        return "global" if name in GLOBAL_RANK_NAMES else None

    @staticmethod
    def _env_kind(call: ast.Call, callee: str) -> RankKind | None:
        if not (callee.endswith("environ.get") or callee.endswith("getenv")) or not call.args:
            return None
        key = call.args[0]
        return (
            RANK_ENV.get(key.value) if isinstance(key, ast.Constant) and isinstance(key.value, str) else None
        )

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
            # `is_main_process or distributed_type == DEEPSPEED`: every rank, where the backend needs
            # it; while `not enable_fsdp or rank == 0` ("one process, or rank 0") is a gate.
            if isinstance(test.op, ast.Or) and any(
                not isinstance(v, ast.UnaryOp) and _needs_every_rank(self.script.text(v, 200))
                for v in test.values
            ):
                return None
            return sides.pop() if len(sides) == 1 else "zero" if "zero" in sides else "other"
        if isinstance(test, ast.Compare):
            return self._compare(test, scope) or writer_parameter_side(test, scope)
        if isinstance(test, ast.Name | ast.Attribute | ast.Call) and self.rank_kind(test, scope):
            return "nonzero"  # `if rank:` holds on every rank but 0
        if isinstance(test, ast.Name):
            found = self._lookup(self.preds, test.id, scope)
            if found is not None:
                return cast(Side, found)
            return "zero" if test.id in MAIN_NAMES else writer_parameter_side(test, scope)
        if isinstance(test, ast.Attribute):
            found = self._lookup(self.preds, dotted(test), self.script.tree)
            if found is not None:
                return cast(Side, found)
            return "zero" if test.attr in MAIN_NAMES or _writer_argument(test) else None
        if isinstance(test, ast.Call):
            local = self.script.local_function(test)
            if local is not None and local.name in self.pred_functions:
                return self.pred_functions[local.name]
            name = (self.script.qual(test.func) or "").rsplit(".", 1)[-1]
            # habitat's `rank0_only()`: a main-process decorator called with nothing to wrap
            # answers whether this is the main process.
            bare = not test.args and not test.keywords and main_decorator(name)
            # lingua's `get_is_master()`: a getter of the main-process flag.
            getter = name.removeprefix("get_")
            return "zero" if name in MAIN_NAMES or getter in MAIN_NAMES or bare else None
        if isinstance(test, ast.NamedExpr):
            return self.side(test.value, scope)
        if isinstance(test, ast.IfExp):  # `dist.get_rank() == 0 if dist.is_initialized() else True`
            arms = {
                self.side(arm, scope) for arm in (test.body, test.orelse) if not isinstance(arm, ast.Constant)
            }
            return arms.pop() if len(arms) == 1 else None
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
            unranked = [v for v in test.values if self.side(v, scope) is None]
            # `dist.is_initialized() and rank != 0`: its negation is "one process, or rank 0"
            if isinstance(test.op, ast.And) and not all(
                _distributed_check(self.script.text(v, 120)) for v in unranked
            ):
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
            left, right, op = right, left, flip(op)
        if _group_rank(left):
            return "other"  # `dist.get_rank(group=tp) == 0`: rank 0 of every such group
        if isinstance(op, ast.In | ast.NotIn) and isinstance(right, ast.Name | ast.Attribute | ast.Call):
            return "other"  # `dist.get_rank() in ranks_to_save`: the ranks that list holds
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
        return compare_side(op, value)

    def _is_rankish(self, expr: ast.AST, scope: Scope) -> bool:
        """A rank, or a rank remapped by `%` / `//` (`rank % gpus_per_node == 0`: node-local zero)."""
        if self.rank_kind(expr, scope):
            return True
        return (
            isinstance(expr, ast.BinOp)
            and isinstance(expr.op, ast.Mod)
            and bool(self.rank_kind(expr.left, scope))
        )

    # -- processes and gates ---------------------------------------------------------------

    def per_rank(self, node: ast.AST) -> bool:
        """Whether this code runs in every rank's process (not in an mp.spawn parent)."""
        return self.processes.per_rank(node)

    def single_process(self, node: ast.AST) -> bool:
        """Code in the `else:` of `if dist.is_initialized():` / `if args.distributed:` / `if
        world_size > 1:` (or under `if not ...:`, `if world_size == 1:`) runs only when the job is
        one process: no other rank runs beside it."""
        child = node
        for outer in self.script.ancestors(node):
            if isinstance(outer, ast.If) and (child in outer.body or child in outer.orelse):
                mode = _distributed_mode(outer.test, self.script.text(outer.test, 120))
                if mode is not None and (child in outer.orelse) == mode:
                    return True
            child = outer
        return False

    def gate(self, node: ast.AST) -> Gate | None:
        """The rank gate `node` runs under in its own function (None: every rank runs it)."""
        return self.gates.gate(node)

    def effective_gate(self, node: ast.AST) -> Gate | None:
        """The gate of `node`, or of its function when that function is only called under one."""
        return self.gates.effective_gate(node)


def _writer_argument(test: ast.Attribute) -> bool:
    """`args.should_save`: the HF TrainingArguments' "this process writes to disk" (the main process,
    or each node's with `save_on_each_node`); not a TrainerControl's `control.should_save`, which
    says that this step saves, on every rank alike."""
    return test.attr == "should_save" and "args" in dotted(test.value).lower()


def _needs_every_rank(text: str) -> bool:
    """A test of a backend under which every rank must make the call (DeepSpeed, FSDP)."""
    lowered = text.lower()
    return "deepspeed" in lowered or "fsdp" in lowered or "fully_shard" in lowered


def _group_rank(expr: ast.AST) -> bool:
    """`dist.get_rank(group=g)` / `dist.get_rank(g)`: a rank within a process group, not the job's."""
    tail = dotted(expr.func).rsplit(".", 1)[-1] if isinstance(expr, ast.Call) else ""
    if tail == "get_local_rank" and isinstance(expr, ast.Call) and (expr.args or expr.keywords):
        return True  # `mesh.get_local_rank(mesh_dim=i)`: a rank within one mesh dimension
    if tail != "get_rank" or not isinstance(expr, ast.Call):
        return False
    given = expr.args[0] if expr.args else next((k.value for k in expr.keywords if k.arg == "group"), None)
    return given is not None and not (isinstance(given, ast.Constant) and given.value is None)


def _distributed_check(text: str) -> bool:
    """`dist.is_initialized()`, `args.distributed`, `world_size > 1`: whether the job is distributed
    at all (false in a single process, which is rank 0)."""
    lowered = text.lower()
    return any(
        word in lowered for word in ("is_initialized", "is_available", "distributed", "ddp", "world_size")
    )


def _distributed_mode(test: ast.expr, text: str) -> bool | None:
    """True for a test that holds exactly when the job is distributed (`dist.is_initialized()`,
    `args.distributed`, `ctx.ddp_enabled`, `world_size > 1`), False for one that holds exactly when
    it is one process (`not dist.is_initialized()`, `world_size == 1`), None for anything else."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _distributed_mode(test.operand, text.removeprefix("not ").strip())
        return None if inner is None else not inner
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        modes = {_distributed_mode(v, "") for v in test.values}  # each conjunct judged alone
        return True if modes == {True} else None
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        count = const_int(test.comparators[0])
        if "world_size" not in text.lower() or count is None:
            return None
        op = test.ops[0]
        if (isinstance(op, ast.Gt | ast.NotEq) and count == 1) or (isinstance(op, ast.GtE) and count == 2):
            return True
        if (isinstance(op, ast.Eq | ast.LtE) and count == 1) or (isinstance(op, ast.Lt) and count == 2):
            return False
        return None
    if isinstance(test, ast.Name | ast.Attribute | ast.Call):
        words = dotted(test.func if isinstance(test, ast.Call) else test).lower()
        if "rank" in words or "main" in words or "master" in words:
            return None
        if any(w in words for w in ("is_initialized", "is_available", "distributed", "ddp")):
            return True
        if words.endswith(".enabled") and any(w in words for w in ("dist", "ddp")):
            return True  # `dist_context.enabled`
    return None
