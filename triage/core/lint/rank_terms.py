"""The words of ranks: the names, calls and variables that hold a rank, the names that mean "the
main process", and what a comparison with a rank says about which ranks it holds on.

`Side` says which ranks a condition holds on (only rank 0, every rank but 0, some), `RankKind`
whether a value is the global or the node-local rank, and a `Gate` is the innermost rank condition
a statement runs under (built in `rank_gates`).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Literal

from triage.core import launchers

Side = Literal["zero", "nonzero", "other"]
RankKind = Literal["global", "local"]

GLOBAL_RANK_NAMES = frozenset(
    {
        "rank",
        "global_rank",
        "world_rank",
        "ddp_rank",
        "process_rank",
        "proc_rank",
        "my_rank",
        "process_index",
        "dist_rank",
        "distributed_rank",  # sam2's trainer: `self.local_rank, self.distributed_rank = ...`
    }
)
LOCAL_RANK_NAMES = frozenset(
    {"local_rank", "ddp_local_rank", "local_process_index", "lrank", "local_gpu_rank"}
)
RANK_CALLS: dict[str, RankKind] = {
    "get_rank": "global",
    "get_global_rank": "global",
    "get_ordinal": "global",
    "process_index": "global",  # jax.process_index(), the rank of a JAX/Flax script
    "get_local_rank": "local",
    "get_local_ordinal": "local",
    "get_node_local_rank": "local",
}
RANK_ENV: dict[str, RankKind] = {
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
        "is_root_worker",  # DALLE-pytorch's backends, DeepSpeed-era helpers
        "is_local_root_worker",
        "is_local_master",  # VAR's and others' dist helpers: local rank 0, once per node
        "is_local_main",
        "is_root_process",
        "is_first_worker",
        "if_main_process",  # speechbrain's test beside its `main_process_only` decorator
    }
)
MAIN_DECORATORS = frozenset(
    {
        "rank_zero_only",
        "main_process_only",
        "on_main_process",
        "on_local_main_process",
        "master_only",  # BasicSR, mmcv
        "rank0_only",
    }
)
# LAVIS's and BLIP's `@main_process`, `@on_main_process`, `@rank_0_only`: a name that is "main",
# "master" or "rank 0" said of a process or a rank, or with `_only`. A bare `@main` is not one.
_MAIN_DECORATOR = re.compile(
    r"(?:on_)?(?:local_)?(?:main|master|primary|rank_?0|rank_?zero)"
    r"(?P<process>_process|_proc|_rank|_worker)?(?P<only>_only)?"
)


def main_decorator(name: str) -> bool:
    """Whether a decorator of this name keeps the function it wraps to the main process."""
    match = _MAIN_DECORATOR.fullmatch(name)
    return name in MAIN_DECORATORS or (
        match is not None
        and (match["process"] is not None or match["only"] is not None or name.startswith("rank"))
    )


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


def flip(op: ast.cmpop) -> ast.cmpop:
    """The same comparison with its sides swapped (`0 < rank` is `rank > 0`)."""
    flips: dict[type[ast.cmpop], ast.cmpop] = {
        ast.Lt: ast.Gt(),
        ast.Gt: ast.Lt(),
        ast.LtE: ast.GtE(),
        ast.GtE: ast.LtE(),
    }
    return flips.get(type(op), op)


def compare_side(op: ast.cmpop, value: int) -> Side | None:
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


def writer_parameter_side(test: ast.AST, scope: ast.AST) -> Side | None:
    """`if log_writer is not None:` on a writer the function is handed: MAE, DeiT-style engines and
    their descendants create the TensorBoard writer on rank 0 only and pass None elsewhere, so the
    test is their rank gate. (A writer created in the same file is judged where it is created.)"""
    params = _parameters(scope)
    if isinstance(test, ast.Name):
        return "zero" if _writer(test, params) else None
    if (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and _writer(test.left, params)
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value is None
    ):
        return {ast.IsNot: "zero", ast.Is: "nonzero"}.get(type(test.ops[0]))  # type: ignore[return-value]
    return None


def _writer(expr: ast.AST, params: frozenset[str]) -> bool:
    return isinstance(expr, ast.Name) and expr.id in params and "writer" in expr.id.lower()


def _parameters(scope: ast.AST) -> frozenset[str]:
    if not isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
        return frozenset()
    args = scope.args
    return frozenset(a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs))


def unset_test(test: ast.AST, name: str) -> bool:
    """`name == -1`, `name < 0`, `name is None`: a rank the launcher did not set."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.left, ast.Name)):
        return False
    try:
        value = ast.literal_eval(test.comparators[0])
    except ValueError:
        return False
    op = test.ops[0]
    return test.left.id == name and (
        (isinstance(op, ast.Eq) and value == -1)
        or (isinstance(op, ast.Lt) and value == 0)
        or (isinstance(op, ast.Is) and value is None)
    )
