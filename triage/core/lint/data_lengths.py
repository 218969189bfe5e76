"""Whether ranks that read different amounts of split data can still wait for one another
(TRG009's `split_dataset_by_node`): not in an evaluation pass whose forwards communicate nothing, nor
over a stream read only up to a step budget every rank shares."""

from __future__ import annotations

import ast

from triage.core.lint.context import Context
from triage.core.lint.patterns import value_before
from triage.core.lint.reach import for_evaluation
from triage.core.lint.script import Call, dotted


def evaluated_without_sync(ctx: Context, call: Call) -> bool:
    """GaLore's `evaluate_model`: ranks may read different numbers of validation batches, but a
    DDP model's forward without gradients all-reduces nothing, so none waits for another (an FSDP
    or DeepSpeed forward gathers parameters, and does)."""
    return for_evaluation(ctx, call.node) and not ctx.wrappers.of_kind("fsdp", "fsdp2", "deepspeed")


def streamed(ctx: Context, call: Call) -> bool:
    """The split data is a `load_dataset(..., streaming=True)` stream (through `.shuffle()` and
    the names it was bound to): a web-scale stream, read until a step budget, not to its end."""
    expr: ast.AST | None = call.node.args[0] if call.node.args else call.kwarg("dataset")
    for _ in range(4):
        if isinstance(expr, ast.Name):
            expr = value_before(ctx.script, expr, expr)  # bound in a statement before this use
        if not isinstance(expr, ast.Call):
            return False
        if dotted(expr.func).rsplit(".", 1)[-1] == "load_dataset":
            streaming = next((k.value for k in expr.keywords if k.arg == "streaming"), None)
            return isinstance(streaming, ast.Constant) and streaming.value is True
        expr = expr.func.value if isinstance(expr.func, ast.Attribute) else None
    return False


def step_budget(ctx: Context, call: Call) -> bool:
    """A loop of the function that splits the data ends on a step count (`if update_step >
    args.num_training_steps: break`), the same on every rank."""
    for node in ast.walk(call.scope):
        if (
            not isinstance(node, ast.If)
            or not node.body
            or not isinstance(node.body[-1], ast.Break)
            or not isinstance(node.test, ast.Compare)
        ):
            continue
        if any("step" in dotted(part).lower() for part in [node.test.left, *node.test.comparators]):
            return True
    return False
