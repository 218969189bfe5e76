"""D23: side effects every rank performs when one should.

TRG023: every rank writes the same checkpoint (`torch.save`, `save_pretrained`, `save_file`), creates
        the same directory without `exist_ok` (`os.makedirs`, `os.mkdir`, `Path.mkdir`), deletes the
        same tree (`shutil.rmtree`), moves or removes the same file (`shutil.move`, `os.remove` after
        an existence test or in a function that lists the folder), or starts its own tracker run (`wandb.init`, `SummaryWriter`,
        `mlflow.start_run`).
TRG037: every rank prints in the training loop or draws its own progress bar.

Code counts as gated when it sits under a rank condition, or in a function of this file that is
only ever called under one. A path or message that mentions the rank is per-rank on purpose.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from triage.core.lint.context import Context
from triage.core.lint.directories import created_in_turn, exists_guarded, path_mkdir
from triage.core.lint.model import Finding, Rule
from triage.core.lint.patterns import loops_of
from triage.core.lint.reach import anchored
from triage.core.lint.removals import shared_removal, tree_removal
from triage.core.lint.script import Call, dotted
from triage.core.lint.write_targets import (
    callers_target,
    handed_checkpoint,
    in_memory,
    mentions_rank,
    named_writer,
    scripted,
    temporary,
)

TRG023 = Rule(
    code="TRG023",
    entry="D23",
    severity="warning",
    name="every-rank-writes",
    message="every rank performs this write; only one rank should",
    fix="put the write under `if rank == 0:` (and a barrier after it, outside the if, before anyone reads it)",
    fact="lint.every_rank_writes",
    finds=(
        "In a script that runs as several processes, outside any rank condition: `torch.save` (or a"
        " TorchScript module's `save`, `torch.jit.save`) to a path that does not contain the rank (nor a"
        " temporary or uuid-named one), `save_pretrained` of a model without `is_main_process=` (not a"
        " tokenizer's or config's, nor in a script the HF Trainer runs, where each rank writes the same"
        " whole weights),"
        " `safetensors` `save_file`, an imported `save...` helper handed a dict of `state_dict()`s,"
        " `os.makedirs`, `os.mkdir` or `Path.mkdir` without `exist_ok=True`"
        " (unless it is made under `if not exists:` while the ranks take turns, as in"
        " `main_process_first()`), `shutil.rmtree` without `ignore_errors=True`, `shutil.move` of a"
        " shared path, `os.remove`/`os.unlink` under an existence test or in a function that lists a"
        " directory (`os.listdir`, `glob`, `iterdir`: keep-last-k pruning; not in a `finally:` clean-up"
        " nor under `except OSError`), and `wandb.init`,"
        " `SummaryWriter` or `mlflow.start_run`. A write just before `sys.exit(1)` or `raise` is the"
        " failing rank's dump on its way out, not reported."
    ),
    why=(
        "A distributed job is N copies of the script. N processes writing one checkpoint path at once"
        ' interleave or truncate each other\'s zip archive ("failed finding central directory" on'
        " load), `os.makedirs` races into FileExistsError, `shutil.rmtree` of one tree by N processes"
        " (and a move or check-then-remove of one file) into FileNotFoundError, and trackers get N runs"
        " per job."
    ),
    example=(
        "import torch\nimport torch.distributed as dist\n\n"
        "dist.init_process_group('nccl')\n"
        "torch.save(model.state_dict(), 'checkpoint.pt')\n"
    ),
    fixed=(
        "import torch\nimport torch.distributed as dist\n\n"
        "dist.init_process_group('nccl')\n"
        "if dist.get_rank() == 0:\n"
        "    torch.save(model.state_dict(), 'checkpoint.pt')\n"
        "dist.barrier()\n"
    ),
)
TRG037 = Rule(
    code="TRG037",
    entry="D23",
    severity="info",
    name="every-rank-prints",
    message="every rank prints this (or draws its own progress bar): N interleaved copies",
    fix="print on rank 0 only (`if rank == 0:`, `accelerator.print`), and pass `disable=not is_main` to tqdm",
    fact="lint.every_rank_prints",
    finds=(
        "In a script that runs as several processes, outside any rank condition: `print(...)` inside a"
        " loop (reported once per loop) whose text does not mention the rank, and `tqdm(...)` without"
        " `disable=`."
    ),
    why=(
        "Every process prints, so each line appears N times, interleaved with the others in one"
        " terminal or SLURM file, and N progress bars fight over the same line. Real errors drown in"
        " the noise."
    ),
    example=(
        "import torch.distributed as dist\n\n"
        "dist.init_process_group('nccl')\n"
        "for step, batch in enumerate(loader):\n"
        "    loss = train_step(batch)\n"
        "    print(f'step {step} loss {loss:.3f}')\n"
    ),
    fixed=(
        "import torch.distributed as dist\n\n"
        "dist.init_process_group('nccl')\n"
        "for step, batch in enumerate(loader):\n"
        "    loss = train_step(batch)\n"
        "    if dist.get_rank() == 0:\n"
        "        print(f'step {step} loss {loss:.3f}')\n"
    ),
)
RULES = (TRG023, TRG037)

_SAME_FILE = "N processes write the same file at once; write on rank 0, then barrier"


def _everyone(ctx: Context, call: Call) -> bool:
    """Whether every rank runs this call (no rank condition around it, in a per-rank process)."""
    gate = ctx.ranks.effective_gate(call.node)
    return (
        (gate is None or gate.side == "nonzero")
        and ctx.ranks.per_rank(call.node)
        and not ctx.ranks.single_process(call.node)
        and not _conditional_expression(ctx, call)
        and not _asserted_main(ctx, call)
        and not _main_or_backend(ctx, call)
        and anchored(ctx, call.node)
    )


def _main_or_backend(ctx: Context, call: Call) -> bool:
    """`if is_main_process or distributed_type == DEEPSPEED:` lets every rank into a save that
    DeepSpeed needs from all; the file work around it is rank 0's everywhere else, on purpose."""
    child: ast.AST = call.node
    for outer in ctx.script.ancestors(call.node):
        if (
            isinstance(outer, ast.If)
            and child in outer.body
            and isinstance(outer.test, ast.BoolOp)
            and isinstance(outer.test.op, ast.Or)
            and any(ctx.ranks.side(v, call.scope) == "zero" for v in outer.test.values)
        ):
            return True
        child = outer
    return False


def _asserted_main(ctx: Context, call: Call) -> bool:
    """`assert rank == 0` earlier in a block that holds the call: only rank 0 gets this far."""
    child: ast.AST = call.node
    for outer in ctx.script.ancestors(call.node):
        for block in ("body", "orelse"):
            statements = getattr(outer, block, None)
            if isinstance(statements, list) and child in statements:
                for statement in statements[: statements.index(child)]:
                    if (
                        isinstance(statement, ast.Assert)
                        and ctx.ranks.side(statement.test, call.scope) == "zero"
                    ):
                        return True
        child = outer
    return False


def _conditional_expression(ctx: Context, call: Call) -> bool:
    """`tqdm(it) if is_main else it`, `is_main and print(x)`: a rank condition inside the statement."""
    for parent in ctx.script.ancestors(call.node):
        if isinstance(parent, ast.stmt):
            return False
        if isinstance(parent, ast.IfExp) and ctx.ranks.side(parent.test, call.scope) is not None:
            return True
        if isinstance(parent, ast.BoolOp) and any(ctx.ranks.side(v, call.scope) for v in parent.values):
            return True
    return False


# The helpers of torchvision's references (copied by DeiT, DETR, DINO, MAE, ConvNeXt, ...):
# `init_distributed_mode` calls `setup_for_distributed`, which replaces `builtins.print`.
_PRINT_SILENCERS = frozenset({"setup_for_distributed", "init_distributed_mode"})


def _print_replaced(ctx: Context, call: Call) -> bool:
    """The DeiT/DINO/MAE `setup_for_distributed`: `builtins.print` replaced by one that prints on
    the main process only (or with `force=True`). A `force=` keyword says the same from a caller."""
    if call.kwarg("force") is not None:
        return True
    cached = ctx.script.cache.get("side_effects.print_replaced")
    if not isinstance(cached, bool):
        cached = any(
            any(dotted(t) in ("builtins.print", "__builtin__.print") for t in node.targets)
            for node in ctx.script.of_type(ast.Assign)
        ) or any(c.tail in _PRINT_SILENCERS for c in ctx.script.call_list)
        ctx.script.cache["side_effects.print_replaced"] = cached
    return cached


def _leaves_loop(ctx: Context, call: Call) -> bool:
    """A print just before `break` / `return` / `sys.exit()`: said once, as the loop ends."""
    return any(_leaves(s) for s in _after(ctx, call))


def _after(ctx: Context, call: Call) -> list[ast.stmt]:
    """The statements after the call's own, in its block."""
    stmt = ctx.script.statement_of(call.node)
    parent = ctx.script.parents.get(stmt) if stmt is not None else None
    if stmt is None or parent is None:
        return []
    for field in ("body", "orelse", "finalbody"):
        block = getattr(parent, field, None)
        if isinstance(block, list) and stmt in block:
            return block[block.index(stmt) + 1 :]
    return []


def _handling(ctx: Context, call: Call, loop: ast.AST) -> bool:
    """A print in an `except` handler inside the loop reports this rank's own failure (InternVL's
    dataset retry loop: `except Exception as e: print(e, self.ds_name)`), not N copies of a line."""
    for parent in ctx.script.ancestors(call.node):
        if parent is loop:
            return False
        if isinstance(parent, ast.ExceptHandler):
            return True
    return False


def _aborting(ctx: Context, call: Call) -> bool:
    """A write just before `sys.exit(1)` or `raise` in the same block (`if not isfinite(loss):
    torch.save(batch, "debug.pt"); sys.exit(1)`): the dump of this rank's own failure on its way
    out, not a save every rank makes as training goes."""
    return any(_fails(s) for s in _after(ctx, call))


def _fails(stmt: ast.stmt) -> bool:
    if isinstance(stmt, ast.Raise):
        return True
    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
        return False
    if dotted(stmt.value.func) not in ("sys.exit", "exit", "quit", "os._exit"):
        return False
    code = stmt.value.args[0] if stmt.value.args else None
    return code is not None and not (isinstance(code, ast.Constant) and code.value in (0, None, False))


def _leaves(stmt: ast.stmt) -> bool:
    if isinstance(stmt, ast.Break | ast.Return | ast.Raise):
        return True
    return (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Call)
        and dotted(stmt.value.func).rsplit(".", 1)[-1] in ("exit", "_exit")
    )


def _write(ctx: Context, call: Call) -> str | None:
    """The message for a write every rank should not do; None when the call is not one."""
    name, tail = call.name, call.tail
    if name in ("torch.save", "torch.jit.save") or scripted(ctx, call):
        position = 0 if name not in ("torch.save", "torch.jit.save") else 1
        target = call.node.args[position] if len(call.node.args) > position else call.kwarg("f")
        if target is None or mentions_rank(ctx, target, call) or in_memory(ctx, target, call):
            return None
        if callers_target(ctx, target, call):
            return None
        if temporary(ctx, target, call):
            return None
        return f"{ctx.script.text(call.node.func, 40)}() runs on every rank and the path does not contain the rank: {_SAME_FILE}"
    if tail == "save_file" and name.startswith("safetensors"):
        return f"safetensors save_file() runs on every rank: {_SAME_FILE}"
    if handed_checkpoint(ctx, call):
        return f"{ctx.script.text(call.node.func, 40)}() is handed a checkpoint of state_dict()s on every rank: {_SAME_FILE}"
    if named_writer(ctx, call):
        return f"{ctx.script.text(call.node.func, 40)}() says it writes files, and runs on every rank: {_SAME_FILE}"
    if (
        tail == "save_pretrained"
        and call.kwarg("is_main_process") is None
        and call.kwarg("save_function") is None  # `accelerator.save` writes on the main process only
        and (not call.has_star_kwargs() or _passes_on_plain_kwargs(ctx, call))
        and ctx.script.local_function(call.node) is None  # this file's own method: judged inside
        and not _metadata(ctx, call)
        and not _trainer_script(ctx)
    ):
        return (
            f"{ctx.script.text(call.node.func, 40)}() runs on every rank without is_main_process=: N processes"
            " write the same files; pass is_main_process=(rank == 0) or save on rank 0"
        )
    if name in ("wandb.init", "mlflow.start_run"):
        mode = call.kwarg("mode")
        if isinstance(mode, ast.Constant) and mode.value == "disabled":
            return None  # the other ranks' no-op run (`else: wandb.init(mode="disabled")`)
        names = [k.value for k in call.node.keywords if k.arg in ("name", "id", "run_name")]
        if any(mentions_rank(ctx, value, call) for value in names):
            return None  # one run per process on purpose, each named for its rank
        return f"{name}() runs on every rank: one tracker run per process; start it on rank 0 only"
    if tail == "SummaryWriter" and "tensorboard" in name.lower():
        # One log directory per process on purpose, named for its rank; one step of names only
        # (`log_dir = join(kwargs["output_dir"], "tb")` is not per rank for a model moved to one).
        given = (*call.node.args, *(k.value for k in call.node.keywords))
        if any(mentions_rank(ctx, arg, call, depth=1) for arg in given):
            return None
        return "SummaryWriter() runs on every rank: one event file per process in the log directory; create it on rank 0 only"
    if tree_removal(ctx, call):
        return (
            f"{'shutil.rmtree' if name == 'shutil.rmtree' else ctx.script.text(call.node.func, 40)}() runs on"
            " every rank: the processes delete the same tree at once and all but one fail with"
            " FileNotFoundError; delete on rank 0 (or pass ignore_errors=True)"
        )
    if shared_removal(ctx, call):
        return (
            f"{name}() runs on every rank: the processes move or remove the same file at once and all"
            " but the first fail with FileNotFoundError; do it on rank 0 (or catch the error)"
        )
    mkdir = path_mkdir(ctx, call)
    if (name == "os.makedirs" or mkdir) and created_in_turn(ctx, call):
        return None  # rank 0 creates it, the others find it there
    if (name == "os.makedirs" and call.kwarg("exist_ok") is None) or mkdir:
        made = f"{ctx.script.text(call.node.func, 40)}() without exist_ok=True runs on every rank"
        if exists_guarded(ctx, call):
            return (
                f"{made} under `if not exists:`: two ranks can both find it missing, and the second"
                " mkdir raises FileExistsError; pass exist_ok=True or create it on rank 0"
            )
        return (
            f"{made}: all but the first race into FileExistsError; pass exist_ok=True or create it on rank 0"
        )
    return None


_METADATA_WORDS = ("config", "tokenizer", "processor", "feature_extractor")


def _metadata(ctx: Context, call: Call) -> bool:
    """`tokenizer.save_pretrained`, `model.config.save_pretrained`: a few identical JSON files, not
    the weights whose concurrent writes corrupt a checkpoint."""
    receiver = ctx.script.text(call.receiver, 80).lower() if call.receiver is not None else ""
    return any(word in receiver for word in _METADATA_WORDS)


_SAVE_CHOICES = ("is_main_process", "save_function")


def _passes_on_plain_kwargs(ctx: Context, call: Call) -> bool:
    """`def save_pretrained(self, d, **kwargs): model.save_pretrained(d, **kwargs)`: the only
    `**` is the function's own, and no call in the file hands it `is_main_process=` or
    `save_function=` (or a `**` of its own), so the plain call, the one this file makes, writes on
    every rank. Only in a file that wraps a model for its processes: a converter's helper that
    passes options on runs in one process."""
    if not ctx.wrappers.of_kind("ddp", "fsdp", "fsdp2", "deepspeed", "prepared", "accelerator", "fabric"):
        return False
    function = ctx.script.scope_of(call.node)
    if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef) or function.args.kwarg is None:
        return False
    own = function.args.kwarg.arg
    stars = [k.value for k in call.node.keywords if k.arg is None]
    if not all(isinstance(v, ast.Name) and v.id == own for v in stars):
        return False
    for other in ctx.script.call_list:
        if other.tail != function.name or other.node is call.node:
            continue
        if other.has_star_kwargs() or any(other.kwarg(k) is not None for k in _SAVE_CHOICES):
            return False
    return True


def _trainer_script(ctx: Context) -> bool:
    """A script the HF Trainer (or TRL's) runs, with no wrapper of its own: `trainer.train()` then
    `model.save_pretrained(out)` is how these scripts end, the weights are whole on every rank, and
    each process writes the same bytes; `trainer.save_model` would say it once."""
    wrappers = ctx.wrappers
    return wrappers.of_kind("hf_trainer") and not wrappers.of_kind(
        "ddp", "fsdp", "fsdp2", "deepspeed", "prepared"
    )


def _check_writes(ctx: Context) -> Iterator[Finding]:
    for call in ctx.script.call_list:
        message = _write(ctx, call)
        if message is not None and _everyone(ctx, call) and not _aborting(ctx, call):
            gate = ctx.ranks.effective_gate(call.node)
            if gate is not None:  # the other ranks, all of them
                message = message.replace("on every rank", f"on every rank but rank 0 ({gate.where})", 1)
            yield ctx.finding(TRG023, call.node, message)


def _check_prints(ctx: Context) -> Iterator[Finding]:
    reported: set[int] = set()
    for call in ctx.script.call_list:
        if call.name == "print":
            loops = loops_of(ctx.script, call.node)
            if not loops or id(loops[-1]) in reported or not _everyone(ctx, call):
                continue
            if _print_replaced(ctx, call) or _leaves_loop(ctx, call) or _handling(ctx, call, loops[-1]):
                continue
            if any(mentions_rank(ctx, arg, call) for arg in call.node.args) or call.kwarg("file") is not None:
                continue
            reported.add(id(loops[-1]))
            yield ctx.finding(
                TRG037,
                call.node,
                "print() in this loop runs on every rank: each line appears once per process; print on rank 0",
            )
        elif call.tail == "tqdm" and call.kwarg("disable") is None and _everyone(ctx, call):
            yield ctx.finding(
                TRG037,
                call.node,
                "tqdm() without disable= draws one progress bar per rank; pass disable=not is_main",
            )


def check(ctx: Context) -> Iterator[Finding]:
    """Every finding of this module's rules on one script."""
    yield from _check_writes(ctx)
    yield from _check_prints(ctx)
