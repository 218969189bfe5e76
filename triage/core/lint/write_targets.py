"""What the target of a write says about who writes it: a path that names the rank (or a replica),
a temporary path, an in-memory buffer, or a file the caller of an uncalled method chooses."""

from __future__ import annotations

import ast

from triage.core.lint.context import Context
from triage.core.lint.script import Call, dotted


def mentions_rank(ctx: Context, expr: ast.AST, call: Call, depth: int = 3) -> bool:
    """Whether a path or message depends on the rank, following the names it is built from in the
    same function (`name = f"mp_rank_{tp_rank:02d}"`, then `join(d, f"{name}.pt")`)."""
    for node in ast.walk(expr):
        if isinstance(node, ast.Name | ast.Attribute | ast.Call) and ctx.ranks.rank_kind(node, call.scope):
            return True
        if isinstance(node, ast.Name | ast.Attribute) and _names_a_process(dotted(node)):
            return True
        if isinstance(node, ast.keyword) and node.arg and "rank" in node.arg.lower():
            return True
        if depth and isinstance(node, ast.Name | ast.Attribute):
            for value in _assigned(ctx, node, call.scope):
                if mentions_rank(ctx, value, call, depth - 1):
                    return True
    return False


def _names_a_process(name: str) -> bool:
    """`tp_rank`, `cfg.LOCAL_RANK`; and a replica's id (`REPLICA_GROUP_ID`, `replica_idx`: in torch's
    words, as in DistributedSampler's `num_replicas`, a replica is one process of the job), not their
    number (`num_replicas`)."""
    if "rank" in name.lower():
        return True
    lowered = name.rsplit(".", 1)[-1].lower()
    return "replica" in lowered and not any(w in lowered for w in ("num", "count", "size", "world"))


def _assigned(ctx: Context, target: ast.Name | ast.Attribute, scope: ast.AST) -> list[ast.expr]:
    """The values a name is assigned in one function (or the module); for `self.path`, in any
    method of the class (`self.path = f"queue{self.trainer.global_rank}.pth"` in `setup`)."""
    text = dotted(target)
    owner = ctx.script.enclosing_class(target) if isinstance(target, ast.Attribute) else None
    if isinstance(target, ast.Attribute) and (not text.startswith("self.") or owner is None):
        return []
    values = []
    for node in _assignments(ctx).get(text, []):
        same = (
            ctx.script.scope_of(node) is scope
            if isinstance(target, ast.Name)
            else ctx.script.enclosing_class(node) is owner
        )
        if same:
            values.append(node.value)
    return values


def _assignments(ctx: Context) -> dict[str, list[ast.Assign]]:
    """Every assignment of the file by the text of its target."""
    cached = ctx.script.cache.get("side_effects.assignments")
    if isinstance(cached, dict):
        return cached
    found: dict[str, list[ast.Assign]] = {}
    for node in ctx.script.of_type(ast.Assign):
        for target in node.targets:
            found.setdefault(dotted(target), []).append(node)
    ctx.script.cache["side_effects.assignments"] = found
    return found


def temporary(ctx: Context, path: ast.AST, call: Call, depth: int = 2) -> bool:
    """A path in `tempfile.mkdtemp()` (or a TemporaryDirectory) made in this function, or one that
    holds a fresh random id (`f"{exp_dir}/batch-{uuid4()}.pt"`), directly or through the names it
    is built from: each process's own."""
    for node in ast.walk(path):
        if isinstance(node, ast.Call) and _unique(ctx.script.qual(node.func) or ""):
            return True
        if (
            depth
            and isinstance(node, ast.Name | ast.Attribute)
            and any(temporary(ctx, value, call, depth - 1) for value in _assigned(ctx, node, call.scope))
        ):
            return True
    return False


def _unique(callee: str) -> bool:
    return "tempfile" in callee or callee.rsplit(".", 1)[-1] in ("uuid1", "uuid4")


_SCRIPTING = frozenset({"script", "trace", "freeze", "optimize_for_inference"})


def scripted(ctx: Context, call: Call) -> bool:
    """`m = torch.jit.script(model)` then `m.save(path)`: a TorchScript module writes its archive
    (a zip, as torch.save's) to the path it is given."""
    receiver = call.receiver
    if call.tail != "save" or not isinstance(receiver, ast.Name | ast.Attribute) or not call.node.args:
        return False
    values = [receiver, *_assigned(ctx, receiver, call.scope)]
    return any(
        isinstance(v, ast.Call)
        and (ctx.script.qual(v.func) or "").startswith("torch.jit.")
        and (ctx.script.qual(v.func) or "").rsplit(".", 1)[-1] in _SCRIPTING
        for v in values
    )


def in_memory(ctx: Context, target: ast.AST, call: Call) -> bool:
    """`torch.save(obj, buffer)` into an io.BytesIO made in the same function (`buffer = BytesIO()`,
    `with io.BytesIO() as f:`) writes no file."""
    if not isinstance(target, ast.Name):
        return False
    for node in ast.walk(call.scope):
        if isinstance(node, ast.Assign) and any(dotted(t) == target.id for t in node.targets):
            value: ast.expr = node.value
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            if dotted(node.optional_vars) != target.id:
                continue
            value = node.context_expr
        else:
            continue
        if isinstance(value, ast.Call) and (ctx.script.qual(value.func) or "").endswith("BytesIO"):
            return True
    return False


def callers_target(ctx: Context, target: ast.AST, call: Call) -> bool:
    """A method `def save(self, f): torch.save(state, f)` that nothing in this file calls: whoever
    holds the object calls it, with a file (or buffer) and on ranks this file does not say."""
    function = call.scope
    if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef) or not isinstance(target, ast.Name):
        return False
    if not isinstance(ctx.script.parents.get(function), ast.ClassDef):
        return False
    args = function.args
    if target.id not in {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}:
        return False
    imports = ctx.script.imports
    return not any(  # `self.save(f)`, `state.save(f)`, `Optimizer().save(f)`; not `torch.save`
        c.tail == function.name and c.name.split(".", 1)[0] not in imports for c in ctx.script.call_list
    )


_MAIN_WORDS = ("main", "master", "rank", "primary", "zero", "chief")


def handed_checkpoint(ctx: Context, call: Call) -> bool:
    """`save_checkpoint({"state_dict": model.state_dict(), ...}, is_best, dir)`: a library helper
    whose name says it saves, given a checkpoint this process assembles from `state_dict()`s, writes
    that one object to a file. Framework savers every rank must call (Megatron's
    `save_checkpoint(iteration, model, optimizer, ...)`, DeepSpeed's `engine.save_checkpoint(dir)`)
    are handed the models or a directory, never such a dict."""
    tail = call.tail.lower()
    if (
        "save" not in tail
        or any(w in tail for w in _MAIN_WORDS)
        or ctx.script.local_function(call.node) is not None
    ):
        return False  # `utils.save_on_master(...)` says who writes
    root = call.node.func
    while isinstance(root, ast.Attribute):
        root = root.value
    if not isinstance(root, ast.Name) or root.id not in ctx.script.imports:
        return False  # an object's method (`engine.save_checkpoint(dir, client_state={...})`)
    if call.name.startswith("torch.distributed."):
        return False  # `dcp.save({...})`: every rank writes its own shards, and must call it
    given = [*call.node.args, *(k.value for k in call.node.keywords)]
    paths = [value for value in given if not _state_dicts(value)]
    if len(paths) == len(given):
        return False
    return not any(mentions_rank(ctx, value, call) or temporary(ctx, value, call) for value in paths)


def _state_dicts(value: ast.expr) -> bool:
    """A dict display (or `dict(...)`) with an entry that is a `.state_dict()` call."""
    if isinstance(value, ast.Dict):
        entries = value.values
    elif isinstance(value, ast.Call) and dotted(value.func) == "dict":
        entries = [k.value for k in value.keywords]
    else:
        return False
    return any(
        isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute) and v.func.attr == "state_dict"
        for v in entries
    )


# A helper's name that says it writes files: `write_metrics_reports`, `mkdir_and_rename`,
# `dump_results`. Words that say it saves are `handed_checkpoint`'s (framework savers every rank
# must call); `make_exp_dirs` and the like often gate themselves (BasicSR's `@master_only`).
_WRITE_WORDS = frozenset({"write", "rename", "dump"})


def named_writer(ctx: Context, call: Call) -> bool:
    """`write_metrics_reports(save_dir="./output", ...)`, `mkdir_and_rename(log_dir)`: a function
    imported by name (not a method, not this file's) whose name says it writes or renames files,
    handed nothing that names the rank or a temporary path."""
    func = call.node.func
    if not isinstance(func, ast.Name) or func.id not in ctx.script.imports:
        return False
    words = set(func.id.lower().split("_"))
    if not words & _WRITE_WORDS or any(w in func.id.lower() for w in _MAIN_WORDS):
        return False
    if call.name.startswith(("torch.", "os.", "shutil.", "json.", "pickle.", "yaml.")):
        return False
    if not isinstance(ctx.script.parents.get(call.node), ast.Expr):
        return False  # `stats = rename_stats(...)`, `with read_write(cfg):` return what they make
    # A keyword's name says what it is (`save_dir=`, not `images=file_names`); a positional
    # argument, its own text (`log_dir`, `"./out/report.json"`).
    given = [(v, ctx.script.text(v, 120)) for v in call.node.args]
    given += [(k.value, k.arg) for k in call.node.keywords if k.arg]
    paths = [v for v, said in given if any(w in said.lower() for w in _PATH_WORDS)]
    # The path decides who writes what; the contents (`images=` gathered from every rank) do not.
    return bool(paths) and not any(mentions_rank(ctx, v, call) or temporary(ctx, v, call) for v in paths)


# What a file or directory argument is called, or looks like.
_PATH_WORDS = ("dir", "path", "file", "folder", "./", ".json", ".yaml", ".csv", ".txt")
