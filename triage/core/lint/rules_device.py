"""D3 and E19: which GPU each rank uses.

TRG003: a global rank used as a GPU index (`set_device(rank)`, `f"cuda:{rank}"`, `device_ids=[rank]`).
TRG030: a torch.distributed script that never binds a device but puts work on "cuda".
TRG031: `torch.load` without `map_location` in a distributed script.
TRG055: `device_map="auto"` (one process spread over every GPU) in a script run as several processes.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from triage.core.lint.context import Context
from triage.core.lint.model import Finding, Rule
from triage.core.lint.reach import anchored
from triage.core.lint.script import Call, dotted

TRG003 = Rule(
    code="TRG003",
    entry="D3",
    severity="warning",
    name="device-from-global-rank",
    message="a global rank is used as a GPU index; only LOCAL_RANK indexes this node's GPUs",
    fix="index GPUs with LOCAL_RANK (`int(os.environ['LOCAL_RANK'])`) and keep RANK for data and logging",
    fact="lint.wrong_device",
    finds=(
        "`torch.cuda.set_device(rank)`, `torch.device('cuda', rank)`, `f'cuda:{rank}'`, `.cuda(rank)`,"
        " `.to(rank)`, `device_ids=[rank]`, `output_device=rank` or `device_id=rank` where the value"
        " is the process's global rank: `dist.get_rank()`, `os.environ['RANK']`, `args.rank`,"
        " `accelerator.process_index`, or a name assigned from one. The first parameter of a function"
        " started by `mp.spawn` is a local index and is not reported, nor is any rank of a script that"
        " pins its rendezvous to this machine (`MASTER_ADDR = 'localhost'`)."
    ),
    why=(
        "On one node RANK and LOCAL_RANK are equal, so the bug stays hidden. On the second node of a"
        " 2x8 job RANK runs from 8 to 15 while the node has `cuda:0..7`: `invalid device ordinal`, or,"
        " where the index is wrapped or defaulted, several ranks on one GPU."
    ),
    example=(
        "import torch\nimport torch.distributed as dist\n\n"
        "dist.init_process_group('nccl')\n"
        "rank = dist.get_rank()\n"
        "torch.cuda.set_device(rank)\n"
    ),
    fixed=(
        "import os\nimport torch\nimport torch.distributed as dist\n\n"
        "dist.init_process_group('nccl')\n"
        "local_rank = int(os.environ['LOCAL_RANK'])\n"
        "torch.cuda.set_device(local_rank)\n"
    ),
)
TRG030 = Rule(
    code="TRG030",
    entry="D3",
    severity="warning",
    name="no-device-binding",
    message="this torch.distributed script never selects a GPU per rank, so every rank uses cuda:0",
    fix="call `torch.cuda.set_device(local_rank)` before any CUDA work and move tensors with `.to(device)`",
    fact="lint.wrong_device",
    finds=(
        "A script that creates a process group itself (`init_process_group`) and puts work on the"
        " GPU with `.cuda()`, `.to('cuda')` or `torch.device('cuda')`, but never calls"
        " `torch.cuda.set_device` and never sets `CUDA_VISIBLE_DEVICES` per process; or module-level"
        " work on plain 'cuda' (`.cuda()`, `device='cuda'`) above the module-level `set_device` call."
        " Accelerate, Lightning, the HF Trainer and DeepSpeed bind the device themselves and are not"
        " reported."
    ),
    why=(
        "'cuda' means the current device, which is `cuda:0` in every process until something changes"
        " it. Every rank then builds its CUDA context, and often its model, on GPU 0: out of memory,"
        " `Duplicate GPU detected` from NCCL, or tensors split across `cuda:0` and `cuda:LOCAL_RANK`."
    ),
    example=(
        "import torch.distributed as dist\n\ndist.init_process_group('nccl')\nmodel = build_model().cuda()\n"
    ),
    fixed=(
        "import os\nimport torch\nimport torch.distributed as dist\n\n"
        "dist.init_process_group('nccl')\n"
        "torch.cuda.set_device(int(os.environ['LOCAL_RANK']))\n"
        "model = build_model().cuda()\n"
    ),
)
TRG031 = Rule(
    code="TRG031",
    entry="D3",
    severity="info",
    name="load-without-map-location",
    message="torch.load without map_location restores tensors to the GPU they were saved from",
    fix="pass `map_location='cpu'` (or this rank's device) to torch.load",
    finds="`torch.load(path)` with no `map_location` in a script that runs as several processes.",
    why=(
        "A checkpoint saved from rank 0 holds `cuda:0` tensors. Every rank loading it without"
        " `map_location` puts a full copy on GPU 0 first: memory pressure on GPU 0 and a CUDA context"
        " there for every rank."
    ),
    example=(
        "import torch\nimport torch.distributed as dist\n\n"
        "dist.init_process_group('nccl')\n"
        "state = torch.load('checkpoint.pt')\n"
    ),
    fixed=(
        "import torch\nimport torch.distributed as dist\n\n"
        "dist.init_process_group('nccl')\n"
        "state = torch.load('checkpoint.pt', map_location='cpu')\n"
    ),
)
TRG055 = Rule(
    code="TRG055",
    entry="E19",
    severity="warning",
    name="device-map-auto-in-multiprocess",
    message='device_map="auto" spreads one process over every GPU, but this script runs one process per GPU',
    fix='give each process its own GPU: `device_map={"": local_rank}`, or shard with FSDP/ZeRO-3 instead',
    fact="lint.device_map_auto",
    finds=(
        "`from_pretrained(..., device_map='auto')` (also 'balanced', 'sequential') in a script that"
        " uses torch.distributed, DDP, FSDP, DeepSpeed or Accelerate's `prepare`."
    ),
    why=(
        "`device_map='auto'` is naive model parallelism inside one process. Under torchrun or"
        " `accelerate launch` each of the N processes spreads its own copy over all N GPUs, so GPU 0"
        " runs out of memory, or Accelerate refuses: \"You can't train a model that has been loaded"
        " with `device_map='auto'` in any distributed mode\"."
    ),
    example=(
        "from accelerate import Accelerator\nfrom transformers import AutoModelForCausalLM\n\n"
        "accelerator = Accelerator()\n"
        "model = AutoModelForCausalLM.from_pretrained(name, device_map='auto')\n"
        "model = accelerator.prepare(model)\n"
    ),
    fixed=(
        "from accelerate import Accelerator\nfrom transformers import AutoModelForCausalLM\n\n"
        "accelerator = Accelerator()\n"
        "model = AutoModelForCausalLM.from_pretrained(name, device_map={'': accelerator.local_process_index})\n"
        "model = accelerator.prepare(model)\n"
    ),
)
RULES = (TRG003, TRG030, TRG031, TRG055)

_SELF_BINDING = frozenset({"accelerate", "lightning", "hf_trainer", "deepspeed"})


def _cuda_indices(expr: ast.AST) -> Iterator[ast.AST]:
    """The index expressions inside a device spelled as text: f"cuda:{i}", "cuda:%d" % i, .format(i)."""
    if isinstance(expr, ast.JoinedStr):
        text = "".join(
            v.value for v in expr.values if isinstance(v, ast.Constant) and isinstance(v.value, str)
        )
        if "cuda" in text:
            for value in expr.values:
                if isinstance(value, ast.FormattedValue):
                    yield value.value
    elif isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mod):
        if isinstance(expr.left, ast.Constant) and "cuda" in str(expr.left.value):
            yield from expr.right.elts if isinstance(expr.right, ast.Tuple) else [expr.right]
    elif (
        isinstance(expr, ast.Call)
        and isinstance(expr.func, ast.Attribute)
        and expr.func.attr == "format"
        and isinstance(expr.func.value, ast.Constant)
        and "cuda" in str(expr.func.value.value)
    ):
        yield from expr.args


def _device_args(call: Call) -> Iterator[ast.AST]:
    """Expressions a call uses as a CUDA device or device index."""
    node, tail, name = call.node, call.tail, call.name
    if tail in ("set_device", "set_device_index") and name.startswith("torch.") and node.args:
        yield node.args[0]
    elif name == "torch.device" and node.args:
        first = node.args[0]
        if isinstance(first, ast.Constant) and first.value == "cuda" and len(node.args) > 1:
            yield node.args[1]
        else:
            yield from _cuda_indices(first)
    elif tail in ("cuda", "to") and call.receiver is not None and node.args:
        first = node.args[0]
        if tail == "cuda" or isinstance(first, ast.Name | ast.Attribute | ast.Call):
            yield first  # a call: a helper that returns the device (`.to(self._get_current_device())`)
        yield from _cuda_indices(first)
    for keyword in node.keywords:
        if keyword.arg == "device_ids" and isinstance(keyword.value, ast.List | ast.Tuple):
            yield from keyword.value.elts
        elif keyword.arg in ("output_device", "device_id", "device"):
            yield keyword.value
        elif keyword.arg == "device_map" and isinstance(keyword.value, ast.Dict):
            yield from keyword.value.values  # `device_map={"": rank}`: the whole model on that GPU
        if keyword.arg in ("device", "map_location", "device_id"):
            yield from _cuda_indices(keyword.value)


_THIS_MACHINE = ("localhost", "127.0.0.1")


def _one_node(ctx: Context) -> bool:
    """`os.environ["MASTER_ADDR"] = "localhost"` or `init_method="tcp://127.0.0.1:..."`: the
    rendezvous is pinned to this machine, so no process of the job runs on a second node and every
    rank is also a local index (a `setdefault` is only a default, and does not count)."""
    for node in ast.walk(ctx.script.tree):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant)
            and node.value.value in _THIS_MACHINE
            and any(
                isinstance(t, ast.Subscript)
                and dotted(t.value).endswith("environ")
                and isinstance(t.slice, ast.Constant)
                and t.slice.value == "MASTER_ADDR"
                for t in node.targets
            )
        ):
            return True
    for call in ctx.script.calls("init_process_group"):
        method = call.kwarg("init_method")
        if isinstance(method, ast.Constant) and isinstance(method.value, str):
            host = method.value.split("://", 1)[-1].split(":", 1)[0]
            if host in _THIS_MACHINE:
                return True
    return False


def _check_global_rank(ctx: Context) -> Iterator[Finding]:
    if _one_node(ctx):
        return
    for call in ctx.script.call_list:
        for expr in _device_args(call):
            if ctx.ranks.rank_kind(expr, call.scope) == "global" and ctx.ranks.per_rank(call.node):
                text = ctx.script.text(expr, 40)
                yield ctx.finding(
                    TRG003,
                    call.node,
                    f"`{text}` is the global rank, used as a GPU index in {call.tail}(); on the second node it"
                    " exceeds the GPU count: use LOCAL_RANK",
                )
                break


def _is_plain_cuda(call: Call) -> bool:
    node = call.node
    if call.tail == "cuda" and call.receiver is not None and not node.args and not node.keywords:
        return True
    first = node.args[0] if node.args else None
    is_cuda = isinstance(first, ast.Constant) and first.value == "cuda"
    return is_cuda and ((call.name == "torch.device" and len(node.args) == 1) or call.tail == "to")


def _check_unbound(ctx: Context) -> Iterator[Finding]:
    script = ctx.script
    if script.frameworks & _SELF_BINDING or not any(script.calls("init_process_group")):
        return
    binds = [c for c in script.calls("set_device") if c.name.startswith("torch.cuda")]
    if binds:
        yield from _cuda_before_binding(ctx, binds)
        return
    if "CUDA_VISIBLE_DEVICES" in script.strings or any(_device_helper(ctx, c) for c in script.call_list):
        return
    for call in script.calls("device"):
        if call.name == "torch.cuda.device" and isinstance(ctx.script.parents.get(call.node), ast.Expr):
            yield ctx.finding(
                TRG030,
                call.node,
                f"`{script.text(call.node, 40)}` on its own line selects nothing: torch.cuda.device is a context"
                " manager, so every rank stays on cuda:0; call torch.cuda.set_device (or use it in `with`)",
            )
            return
    for call in script.call_list:
        if _is_plain_cuda(call) and ctx.ranks.per_rank(call.node):
            yield ctx.finding(
                TRG030,
                call.node,
                f"`{script.text(call.node, 40)}` puts work on the current GPU, and nothing in this script sets it per"
                " rank (no torch.cuda.set_device): every rank lands on cuda:0",
            )
            return


def _cuda_before_binding(ctx: Context, binds: list[Call]) -> Iterator[Finding]:
    """Module-level work on plain "cuda" above the module-level `torch.cuda.set_device(...)`:
    modded-nanogpt's import-time `torch.empty(1, device="cuda").backward()` made every rank's CUDA
    context (and that tensor) on GPU 0 before the script bound its device."""
    top = [c for c in binds if isinstance(ctx.scope(c.node), ast.Module)]
    if not top or len(top) != len(binds):
        return  # bound inside a function: when it runs relative to module code is not said here
    first = min(c.node.lineno for c in top)
    for call in ctx.script.call_list:
        if call.node.lineno >= first or not isinstance(call.scope, ast.Module):
            continue
        if (_is_plain_cuda(call) or _cuda_keyword(call)) and ctx.ranks.per_rank(call.node):
            yield ctx.finding(
                TRG030,
                call.node,
                f"`{ctx.script.text(call.node, 40)}` runs before torch.cuda.set_device (line {first}): every rank"
                " creates its CUDA context, and this work, on cuda:0; bind the device first",
            )
            return


def _cuda_keyword(call: Call) -> bool:
    """`torch.empty(1, device="cuda")`, `x.to(device="cuda")`: the current device, by keyword."""
    device = call.kwarg("device")
    return isinstance(device, ast.Constant) and device.value == "cuda"


def _device_helper(ctx: Context, call: Call) -> bool:
    """A helper of the project's own library that picks this rank's device (torchtune's
    `utils.get_device(cfg.device)`, `setup_device(...)`): it may well call set_device itself."""
    return (
        not call.name.startswith("torch.")
        and ctx.script.local_function(call.node) is None
        and call.tail in ("get_device", "setup_device", "init_device", "set_device", "setup_devices")
    )


def _check_load(ctx: Context) -> Iterator[Finding]:
    for call in ctx.script.calls("load"):
        if call.name != "torch.load" or len(call.node.args) > 1 or call.kwarg("map_location") is not None:
            continue
        if call.has_star_kwargs() or not ctx.ranks.per_rank(call.node) or _mapped_elsewhere(ctx, call):
            continue
        if _loads_data(ctx, call):
            continue
        yield ctx.finding(
            TRG031,
            call.node,
            "torch.load() without map_location puts the saved tensors back on the GPU they came from"
            " (cuda:0 on every rank); pass map_location",
        )


def _loads_data(ctx: Context, call: Call) -> bool:
    """`train_data = torch.load(os.path.join(data_dir, "train.pt"))` in lit-llama's
    `load_datasets()`: a dataset prepared on the CPU, not state saved from a GPU. The name it is
    bound to, or the function it is returned from, says so."""
    parent = ctx.script.parents.get(call.node)
    names = [dotted(t) for t in parent.targets] if isinstance(parent, ast.Assign) else []
    if isinstance(parent, ast.Return | ast.Assign):
        function = next((a for a in ctx.script.ancestors(call.node) if isinstance(a, ast.FunctionDef)), None)
        names += [function.name] if function is not None else []
    return any("data" in name.lower().rsplit(".", 1)[-1] for name in names)


def _mapped_elsewhere(ctx: Context, call: Call) -> bool:
    """`if gpu is None: torch.load(p) else: torch.load(p, map_location=loc)`: the other arm of the
    innermost `if` maps the load, so the author chose per case (the unmapped arm is the
    single-process one)."""
    child: ast.AST = call.node
    for parent in ctx.script.ancestors(call.node):
        if isinstance(parent, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            return False
        if isinstance(parent, ast.If):
            other = parent.orelse if child in parent.body else parent.body
            return any(
                isinstance(node, ast.Call)
                and ctx.script.qual(node.func) == "torch.load"
                and any(k.arg == "map_location" for k in node.keywords)
                for stmt in other
                for node in ast.walk(stmt)
            )
        child = parent
    return False


def _multiprocess(ctx: Context) -> bool:
    frameworks = ctx.script.frameworks
    return bool(frameworks & {"torch.distributed", "deepspeed", "env", "spawn"}) or ctx.wrappers.of_kind(
        "prepared"
    )


def _check_device_map(ctx: Context) -> Iterator[Finding]:
    for call in ctx.script.calls("from_pretrained"):
        value = call.kwarg("device_map")
        if not (isinstance(value, ast.Constant) and value.value in ("auto", "balanced", "sequential")):
            continue
        if _multiprocess(ctx) and anchored(ctx, call.node):
            yield ctx.finding(
                TRG055,
                call.node,
                f'device_map="{value.value}" spreads this process\'s model over every GPU, but the script runs'
                " one process per GPU: each process fills all GPUs (or Accelerate refuses to prepare it)",
            )


def check(ctx: Context) -> Iterator[Finding]:
    """Every finding of this module's rules on one script."""
    yield from _check_global_rank(ctx)
    yield from _check_unbound(ctx)
    yield from _check_load(ctx)
    yield from _check_device_map(ctx)
