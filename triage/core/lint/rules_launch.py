"""How the process group is created and how the job survives a failure (MN3, MN5).

TRG040: `init_process_group` (or `deepspeed.init_distributed`) without an explicit `timeout`.
TRG041: the script is started with restarts (`torchrun --max-restarts`, `LaunchConfig(max_restarts=)`)
        but never loads a checkpoint, so every restart trains from step 0.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from triage.core.lint.context import Context
from triage.core.lint.model import Finding, Rule
from triage.core.lint.script import Script, const_int

TRG040 = Rule(
    code="TRG040",
    entry="MN3",
    severity="info",
    name="process-group-default-timeout",
    message="the process group uses the default collective timeout (10 or 30 minutes)",
    fix="pass `timeout=datetime.timedelta(...)` where the group is created: longer for slow phases, short while debugging",
    fact="lint.default_collective_timeout",
    finds="`init_process_group(...)` or `deepspeed.init_distributed(...)` without `timeout=`.",
    why=(
        "One number decides two opposite failures: a rank that died is noticed only when the window"
        " expires (the error arrives 10 to 30 minutes after the cause and names the wrong collective),"
        " and legitimately slow work on one rank (preprocessing, a long save) is killed by the watchdog."
        " Set it on purpose; it cannot be changed after the group exists."
    ),
    example="import torch.distributed as dist\n\ndist.init_process_group('nccl')\n",
    fixed=(
        "import datetime\nimport torch.distributed as dist\n\n"
        "dist.init_process_group('nccl', timeout=datetime.timedelta(minutes=60))\n"
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
            f"{call.tail}() without timeout=: a dead or slow rank surfaces only after the default 10-30 minute"
            " window; set the timeout on purpose",
        )


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
