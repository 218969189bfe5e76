"""How the process group is created and how the job survives a failure (MN3, MN5).

TRG040: `init_process_group` (or `deepspeed.init_distributed`) without an explicit `timeout`, where
        some ranks wait in a barrier while rank 0 alone works.
TRG041: the script is started with restarts (`torchrun --max-restarts`, `LaunchConfig(max_restarts=)`)
        but never loads a checkpoint, so every restart trains from step 0.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from triage.core.lint.communication import communication
from triage.core.lint.context import Context
from triage.core.lint.model import Finding, Rule
from triage.core.lint.script import Script, const_int, dotted

TRG040 = Rule(
    code="TRG040",
    entry="MN3",
    severity="info",
    name="process-group-default-timeout",
    message="ranks wait in a barrier while rank 0 works alone, under the default collective timeout (10 or 30 minutes)",
    fix="pass `timeout=datetime.timedelta(...)` where the group is created, longer than the slowest one-sided phase",
    fact="lint.default_collective_timeout",
    finds=(
        "`init_process_group(...)` or `deepspeed.init_distributed(...)` without `timeout=`, in a script"
        " where some ranks wait in a barrier while rank 0 alone works: `if rank == 0: prepare()` followed"
        " by `barrier()`, or `if rank != 0: barrier()` ahead of the work (the main-process-first pattern)."
        " A script with no such phase is not reported: there the default window is a number nobody waits on."
    ),
    why=(
        "The waiting ranks sit in a collective for as long as rank 0 downloads, preprocesses, evaluates or"
        " saves. If that outlasts the window (10 or 30 minutes by default) the watchdog kills the job,"
        " after the work was done; on a bigger dataset or a slower disk the same script starts failing."
        " Set it on purpose; it cannot be changed after the group exists."
    ),
    example=(
        "import torch.distributed as dist\n\n"
        "dist.init_process_group('nccl')\n"
        "if dist.get_rank() == 0:\n"
        "    tokenize_dataset()\n"
        "dist.barrier()\n"
    ),
    fixed=(
        "import datetime\nimport torch.distributed as dist\n\n"
        "dist.init_process_group('nccl', timeout=datetime.timedelta(hours=2))\n"
        "if dist.get_rank() == 0:\n"
        "    tokenize_dataset()\n"
        "dist.barrier()\n"
    ),
)
TRG041 = Rule(
    code="TRG041",
    entry="MN5",
    severity="warning",
    name="restarts-without-resume",
    message="the job restarts on failure, but the script never loads a checkpoint at start",
    fix="load the latest checkpoint (model, optimizer, scheduler, epoch/step) unconditionally at start-up when one exists",
    fact="lint.restarts_without_resume",
    finds=(
        "A script started with restarts, by `torchrun --max-restarts=N` (N > 0) in a launch script given"
        " to the lint, or by `LaunchConfig(max_restarts=N)` in the script itself, that never loads a"
        " checkpoint: no `torch.load`, `load_state_dict`, `load_checkpoint`, `load_state`,"
        " `torch.distributed.checkpoint.load`, `ckpt_path=` or `resume_from_checkpoint`."
    ),
    why=(
        "TorchElastic restarts every worker from the top of the script; it restores nothing. Without a"
        " load at start each restart trains from step 0: the job keeps running, looks healthy, and the"
        " work before the failure is silently thrown away."
    ),
    example=(
        "from torch.distributed.launcher.api import LaunchConfig, elastic_launch\n\n"
        "def train():\n"
        "    for step in range(steps):\n"
        "        train_step(step)\n\n"
        "config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=8, max_restarts=3)\n"
        "elastic_launch(config, train)()\n"
    ),
    fixed=(
        "import os\nimport torch\nfrom torch.distributed.launcher.api import LaunchConfig, elastic_launch\n\n"
        "def train():\n"
        "    start = 0\n"
        "    if os.path.exists('snapshot.pt'):\n"
        "        start = torch.load('snapshot.pt', map_location='cpu')['step']\n"
        "    for step in range(start, steps):\n"
        "        train_step(step)\n\n"
        "config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=8, max_restarts=3)\n"
        "elastic_launch(config, train)()\n"
    ),
)
RULES = (TRG040, TRG041)

_WAITS = frozenset({"barrier", "monitored_barrier", "wait_for_everyone"})
_CHEAP = frozenset(
    {
        "print",
        "info",
        "debug",
        "warning",
        "warn",
        "error",
        "log",
        "format",
        "join",
        "exists",
        "isdir",
        "makedirs",
        "mkdir",
        "add_scalar",
        "add_scalars",
        "flush",
        "set_description",
        "str",
        "len",
        "int",
    }
)

_LOADS = frozenset(
    {
        "load_state_dict",
        "load_checkpoint",
        "load_state",
        "load_file",
        "load_from_checkpoint",
        "set_state_dict",
        "set_model_state_dict",
        "resume",
        "restore",
        "load_sharded_checkpoint",
    }
)
_RESUME_KWARGS = frozenset({"ckpt_path", "resume_from_checkpoint", "resume", "checkpoint_path"})


def _check_timeout(ctx: Context) -> Iterator[Finding]:
    phase = _one_sided_phase(ctx)
    if phase is None:
        return
    for call in ctx.script.calls("init_process_group", "init_distributed"):
        if not call.name.startswith(("torch.distributed", "deepspeed")) or call.has_star_kwargs():
            continue
        backend = call.kwarg("backend") or (call.node.args[0] if call.node.args else None)
        if call.kwarg("timeout") is not None or (
            isinstance(backend, ast.Constant) and backend.value == "fake"
        ):
            continue
        yield ctx.finding(
            TRG040,
            call.node,
            f"{call.tail}() without timeout=: {phase}; if that outlasts the default 10-30 minute window,"
            " the watchdog kills the job: set the timeout on purpose",
        )


def _one_sided_phase(ctx: Context) -> str | None:
    """Where the collective timeout decides the outcome: some ranks wait in a barrier while rank 0
    alone works (`if rank == 0: prepare()` then `barrier()`, or `if rank != 0: barrier()` before
    the work: the main-process-first pattern). Elsewhere the default window is a number nobody
    waits on, and advice about it on every script is noise."""
    for call in ctx.script.call_list:
        if call.tail not in _WAITS or not ctx.ranks.per_rank(call.node):
            continue
        comm = communication(ctx, call)
        if comm is None:
            continue
        gate = ctx.ranks.gate(call.node)
        if gate is not None and gate.side == "nonzero":
            wait = f"{ctx.script.text(call.node.func, 40)}() at line {call.node.lineno}"
            return f"the other ranks wait in {wait} ({gate.where}) while rank 0 works ahead alone"
        if gate is not None:
            continue
        for before in _preceding(ctx, call.node):
            if (
                isinstance(before, ast.If)
                and ctx.ranks.side(before.test, ctx.scope(before)) == "zero"
                and _works(before.body)
            ):
                test = ctx.script.text(before.test, 40)
                wait = f"{ctx.script.text(call.node.func, 40)}() at line {call.node.lineno}"
                return f"the other ranks wait in {wait} while rank 0 alone works under `if {test}:` (line {before.lineno})"
    return None


def _preceding(ctx: Context, node: ast.AST) -> list[ast.stmt]:
    """The (up to three) statements just before the one holding `node`, in its block."""
    stmt = ctx.script.statement_of(node)
    parent = next(ctx.script.ancestors(stmt), None) if stmt is not None else None
    for field in ("body", "orelse", "finalbody"):
        block = getattr(parent, field, None)
        if isinstance(block, list) and stmt in block:
            at = block.index(stmt)
            return block[max(0, at - 3) : at]
    return []


def _works(body: list[ast.stmt]) -> bool:
    """Whether a block does more than print, log or make a directory."""
    for node in ast.walk(ast.Module(body=body, type_ignores=[])):
        if isinstance(node, ast.Call) and dotted(node.func).rsplit(".", 1)[-1] not in _CHEAP:
            return True
    return False


def loads_checkpoint(script: Script) -> bool:
    """Whether the script restores state from a checkpoint anywhere (MN5's resume)."""
    for call in script.call_list:
        if call.tail in _LOADS or call.name in ("torch.load", "torch.distributed.checkpoint.load"):
            return True
        if call.tail == "load" and call.name.startswith(("torch", "safetensors", "dcp")):
            return True
        if any(k.arg in _RESUME_KWARGS for k in call.node.keywords):
            return True
    return False


def _check_restarts(ctx: Context) -> Iterator[Finding]:
    site: ast.AST | None = None
    where = ""
    for call in ctx.script.calls("LaunchConfig"):
        restarts = const_int(call.kwarg("max_restarts") or ast.Constant(0))
        if restarts:
            site, where = call.node, f"max_restarts={restarts} here"
    if site is None and ctx.launch.max_restarts > 0:
        site = ctx.script.tree.body[0] if ctx.script.tree.body else ctx.script.tree
        where = f"--max-restarts={ctx.launch.max_restarts} in {ctx.launch.where}"
    if site is None or loads_checkpoint(ctx.script):
        return
    yield ctx.finding(
        TRG041,
        site,
        f"the job is restarted on failure ({where}), but this script never loads a checkpoint: each restart"
        " trains from step 0 and silently discards the progress before the failure",
    )


def check(ctx: Context) -> Iterator[Finding]:
    """Every finding of this module's rules on one script."""
    yield from _check_timeout(ctx)
    yield from _check_restarts(ctx)
