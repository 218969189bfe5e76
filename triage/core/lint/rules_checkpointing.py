"""D8: DDP's unused-parameter search together with reentrant activation checkpointing.

TRG007: `find_unused_parameters=True` (in any spelling) in a script that also recomputes
        activations with the reentrant checkpoint (`gradient_checkpointing_enable()`,
        `TrainingArguments(gradient_checkpointing=True)`, `torch.utils.checkpoint.checkpoint(...)`
        without `use_reentrant=False`): the backward fails with "Expected to mark a variable ready
        only once".
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from triage.core.lint.context import Context
from triage.core.lint.model import Finding, Rule
from triage.core.lint.patterns import enclosing_ifs, find_unused_spelling, kwarg_true
from triage.core.lint.script import Call

TRG007 = Rule(
    code="TRG007",
    entry="D8",
    severity="warning",
    name="unused-parameters-with-reentrant-checkpointing",
    message="find_unused_parameters=True with reentrant activation checkpointing: DDP marks parameters ready twice",
    fix="pass use_reentrant=False (`gradient_checkpointing_kwargs={'use_reentrant': False}`), or drop find_unused_parameters",
    finds=(
        "`find_unused_parameters=True` in any of its spellings (DDP, `DistributedDataParallelKwargs`,"
        " `TrainingArguments(ddp_find_unused_parameters=True)`, Lightning's strategy) in a script that"
        " also turns on the reentrant activation checkpoint: `model.gradient_checkpointing_enable()`,"
        " `TrainingArguments(gradient_checkpointing=True)` or `torch.utils.checkpoint.checkpoint(...)`,"
        " none of them with `use_reentrant=False`, and not under a condition (a command-line flag). `static_graph=True`"
        " is the other way out and is not reported."
    ),
    why=(
        "The reentrant checkpoint runs a second, inner backward over the recomputed segment, so DDP's"
        " hooks fire twice for its parameters, and the unused-parameter search has already marked"
        ' them: "RuntimeError: Expected to mark a variable ready only once ... Parameter at index N'
        ' has been marked as ready twice". The first backward fails on every rank.'
    ),
    example=(
        "from accelerate import Accelerator, DistributedDataParallelKwargs\n\n"
        "accelerator = Accelerator(kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=True)])\n"
        "model.gradient_checkpointing_enable()\n"
        "model = accelerator.prepare(model)\n"
    ),
    fixed=(
        "from accelerate import Accelerator, DistributedDataParallelKwargs\n\n"
        "accelerator = Accelerator(kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=True)])\n"
        "model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={'use_reentrant': False})\n"
        "model = accelerator.prepare(model)\n"
    ),
)
RULES = (TRG007,)


def _non_reentrant(value: ast.expr | None) -> bool:
    """`{"use_reentrant": False}` (or `dict(use_reentrant=False)`)."""
    if isinstance(value, ast.Dict):
        return any(
            isinstance(k, ast.Constant)
            and k.value == "use_reentrant"
            and isinstance(v, ast.Constant)
            and v.value is False
            for k, v in zip(value.keys, value.values, strict=True)
        )
    if isinstance(value, ast.Call):
        return any(
            k.arg == "use_reentrant" and isinstance(k.value, ast.Constant) and k.value.value is False
            for k in value.keywords
        )
    return False


def _reentrant_checkpoint(call: Call) -> bool:
    if call.tail == "gradient_checkpointing_enable" or kwarg_true(call, "gradient_checkpointing"):
        return not _non_reentrant(call.kwarg("gradient_checkpointing_kwargs"))
    if call.name.startswith("torch.utils.checkpoint.") and call.tail in (
        "checkpoint",
        "checkpoint_sequential",
    ):
        value = call.kwarg("use_reentrant")
        return not (isinstance(value, ast.Constant) and value.value is False)
    return False


def reentrant_checkpoint(ctx: Context) -> Call | None:
    """The reentrant activation checkpoint the script turns on, unless DDP's static graph copes."""
    calls = ctx.script.call_list
    if any(kwarg_true(c, "static_graph") or c.tail == "_set_static_graph" for c in calls):
        return None
    # Only where it is always on: `if args.gradient_checkpointing:` leaves the pair to a command line
    # this file cannot see.
    return next(
        (c for c in calls if _reentrant_checkpoint(c) and not enclosing_ifs(ctx.script, c.node)), None
    )


def check(ctx: Context) -> Iterator[Finding]:
    """Every finding of this module's rules on one script."""
    checkpoint = reentrant_checkpoint(ctx)
    if checkpoint is None:
        return
    for call in ctx.script.call_list:
        where = find_unused_spelling(call)
        if where is not None:
            yield ctx.finding(
                TRG007,
                call.node,
                f"{where} together with reentrant activation checkpointing (`{ctx.script.text(checkpoint.node, 50)}`,"
                f' line {checkpoint.node.lineno}): the backward fails with "Expected to mark a variable ready only'
                ' once"; pass use_reentrant=False to the checkpoint, or drop find_unused_parameters',
            )
