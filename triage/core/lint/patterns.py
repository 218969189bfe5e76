"""Small recognisers several checks share: world-size values, optimizer steps, loops, accumulation."""

from __future__ import annotations

import ast

from triage.core.lint.script import Call, Script, dotted

WORLD_SIZE_NAMES = frozenset(
    {
        "world_size",
        "ddp_world_size",
        "ngpus_per_node",
        "ngpus",
        "n_gpu",
        "n_gpus",
        "num_gpus",
        "nprocs",
        "num_processes",
        "num_replicas",
        "gpus_per_node",
        "nproc_per_node",
        "num_devices",
        "world",
    }
)
_WORLD_CALLS = frozenset({"get_world_size", "device_count", "xrt_world_size", "get_data_parallel_world_size"})
OPTIMIZER_TAILS = frozenset(
    {
        "SGD",
        "Adam",
        "AdamW",
        "Adagrad",
        "Adadelta",
        "Adamax",
        "NAdam",
        "RAdam",
        "RMSprop",
        "LBFGS",
        "Adafactor",
        "Lion",
        "LAMB",
        "Lamb",
        "FusedAdam",
        "FusedLAMB",
        "DeepSpeedCPUAdam",
        "AdamW8bit",
    }
)


class WorldSize:
    """Recognises the number of processes: `dist.get_world_size()`, `world_size`, `accelerator.num_processes`,
    `os.environ["WORLD_SIZE"]`, and names assigned from any of them anywhere in the file."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.names: set[str] = set()
        self.scaled: set[str] = set()  # `eff_batch_size = batch_size * get_world_size()`
        for _ in range(2):
            for node in script.of_type(ast.Assign):
                targets = [dotted(t) for t in node.targets if dotted(t)]
                if self.is_world_size(node.value):
                    self.names.update(targets)
                elif any(
                    isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mult) and self.depends_on(n)
                    for n in ast.walk(node.value)
                ):
                    self.scaled.update(targets)

    def is_world_size(self, expr: ast.AST) -> bool:
        if isinstance(expr, ast.Call):
            callee = self.script.qual(expr.func) or ""
            tail = callee.rsplit(".", 1)[-1]
            if tail == "int" and expr.args:
                return self.is_world_size(expr.args[0])
            if tail in _WORLD_CALLS or (tail == "size" and callee.startswith("horovod")):
                return True
            if (callee.endswith("environ.get") or callee.endswith("getenv")) and expr.args:
                return isinstance(expr.args[0], ast.Constant) and expr.args[0].value == "WORLD_SIZE"
            return False
        if isinstance(expr, ast.Subscript) and dotted(expr.value).endswith("environ"):
            return isinstance(expr.slice, ast.Constant) and expr.slice.value == "WORLD_SIZE"
        text = dotted(expr)
        if not text:
            return False
        return text in self.names or text.rsplit(".", 1)[-1] in WORLD_SIZE_NAMES

    def mentioned_in(self, expr: ast.AST) -> bool:
        return any(self.is_world_size(node) for node in ast.walk(expr))

    def depends_on(self, expr: ast.AST) -> bool:
        """The world size, or a quantity multiplied by it: MAE's `lr = blr * eff_batch_size / 256`
        where `eff_batch_size = batch_size * accum_iter * get_world_size()`."""
        return self.mentioned_in(expr) or any(
            dotted(node) in self.scaled
            for node in ast.walk(expr)
            if isinstance(node, ast.Name | ast.Attribute)
        )


def world_size(script: Script) -> WorldSize:
    """The script's WorldSize recogniser, built once and shared by the checks."""
    found = script.cache.get("world_size")
    if not isinstance(found, WorldSize):
        found = WorldSize(script)
        script.cache["world_size"] = found
    return found


def is_optimizer_step(call: Call) -> bool:
    """`optimizer.step()`, `opt.step()`, `scaler.step(optimizer)`: an update of the weights."""
    if call.tail != "step" or call.receiver is None:
        return False
    text = dotted(call.receiver).lower()
    return "optim" in text or text.endswith(("opt", "scaler"))


def is_backward(call: Call) -> bool:
    """Whether a call is `loss.backward()` (not torch.autograd.backward)."""
    return (
        call.tail == "backward" and call.receiver is not None and not call.name.startswith("torch.autograd")
    )


def accumulation_like(text: str) -> bool:
    """Whether a name looks like a gradient-accumulation counter."""
    lowered = text.lower()
    return "accum" in lowered or "grad_acc" in lowered or lowered.endswith(("_gas", "gas"))


def loops_of(script: Script, node: ast.AST) -> list[ast.For | ast.While | ast.AsyncFor]:
    """The loops around a node inside its own function, innermost first."""
    found: list[ast.For | ast.While | ast.AsyncFor] = []
    for parent in script.ancestors(node):
        if isinstance(parent, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            break
        if isinstance(parent, ast.For | ast.While | ast.AsyncFor):
            found.append(parent)
    return found


def has_modulo(expr: ast.AST) -> bool:
    """Whether an expression contains a `%`."""
    return any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod) for n in ast.walk(expr))


def enclosing_ifs(script: Script, node: ast.AST, stop: ast.AST | None = None) -> list[ast.If]:
    """The `if` statements whose body (or else) holds a node, innermost first, up to `stop`."""
    found: list[ast.If] = []
    for parent in script.ancestors(node):
        if parent is stop or isinstance(parent, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            break
        if isinstance(parent, ast.If):
            found.append(parent)
    return found


def kwarg_true(call: Call, name: str) -> bool:
    """Whether a call passes `name=True`."""
    value = call.kwarg(name)
    return isinstance(value, ast.Constant) and value.value is True


def keyword_value(script: Script, call: Call, name: str) -> ast.expr | None:
    """`name=` of a call, given directly or through `**options`, a dict of the same function built
    from literals (`options = {"shuffle": True}`, `dict(shuffle=True)`, `options.update(more)`,
    `options["shuffle"] = True`): pytorch/examples' mnist passes `DataLoader(ds, **train_kwargs)`."""
    given = call.kwarg(name)
    if given is not None:
        return given
    scope = script.scope_of(call.node)
    for keyword in call.node.keywords:
        if keyword.arg is None and isinstance(keyword.value, ast.Name):
            found = _dict_entry(script, keyword.value.id, name, scope, 3)
            if found is not None:
                return found
    return None


def _dict_entry(script: Script, variable: str, key: str, scope: ast.AST, depth: int) -> ast.expr | None:
    if depth == 0:
        return None
    values: list[ast.expr] = []
    for node in ast.walk(scope):
        if isinstance(node, ast.Assign) and [dotted(t) for t in node.targets] == [variable]:
            values.append(node.value)
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if (
                isinstance(target, ast.Subscript)
                and dotted(target.value) == variable
                and isinstance(target.slice, ast.Constant)
                and target.slice.value == key
            ):
                return node.value
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "update"
            and dotted(node.func.value) == variable
        ):
            values.extend(node.args)
            for given in node.keywords:
                if given.arg == key:
                    return given.value
    for value in values:
        if isinstance(value, ast.Dict):
            for name, entry in zip(value.keys, value.values, strict=True):
                if isinstance(name, ast.Constant) and name.value == key:
                    return entry
        elif isinstance(value, ast.Call) and dotted(value.func) == "dict":
            for given in value.keywords:
                if given.arg == key:
                    return given.value
        elif isinstance(value, ast.Name):
            found = _dict_entry(script, value.id, key, scope, depth - 1)
            if found is not None:
                return found
    return None


def value_before(script: Script, target: ast.AST, at: ast.AST) -> ast.expr | None:
    """The value `target` (a name, or `self.model`) was last assigned before the statement holding
    `at`, found by walking back through the statements before it, out of the `if`/`with`/`try`
    blocks around it, in its own function; None when anything on the way mentions the name (it
    may move or replace it), a loop is left, or the function starts first."""
    text = dotted(target)
    if not text:
        return None
    root = text.split(".", 1)[0]
    stmt = script.statement_of(at)
    while stmt is not None:
        parent = script.parents.get(stmt)
        block = next(
            (b for f in ("body", "orelse", "finalbody") if stmt in (b := getattr(parent, f, None) or [])),
            None,
        )
        if parent is None or block is None or isinstance(parent, ast.For | ast.While | ast.AsyncFor):
            return None
        for earlier in reversed(block[: block.index(stmt)]):
            if isinstance(earlier, ast.Assign) and [dotted(t) for t in earlier.targets] == [text]:
                return earlier.value
            if (
                isinstance(earlier, ast.AnnAssign)
                and earlier.value is not None
                and dotted(earlier.target) == text
            ):
                return earlier.value  # `data: datasets.Dataset = data.shuffle(seed=42)`
            if any(isinstance(n, ast.Name) and n.id == root for n in ast.walk(earlier)):
                return None
        if not isinstance(parent, ast.If | ast.With | ast.Try):
            return None
        heads: list[ast.AST] = [parent.test] if isinstance(parent, ast.If) else []
        heads += [item.context_expr for item in getattr(parent, "items", [])]
        if any(isinstance(n, ast.Name) and n.id == root for head in heads for n in ast.walk(head)):
            return None
        stmt = parent
    return None


def find_unused_spelling(call: Call) -> str | None:
    """How a call turns DDP's find_unused_parameters on, in any of its spellings; None if it does not."""
    if kwarg_true(call, "find_unused_parameters") or kwarg_true(call, "ddp_find_unused_parameters"):
        return f"{call.tail}(find_unused_parameters=True)"
    if any(
        isinstance(k.value, ast.Constant) and k.value.value == "ddp_find_unused_parameters_true"
        for k in call.node.keywords
    ):
        return 'strategy="ddp_find_unused_parameters_true"'
    return None


def guards(script: Script, node: ast.AST) -> set[str]:
    """The texts of the conditions `node` runs under (`args.fsdp` for a wrap inside `if args.fsdp:`)."""
    found = set()
    child: ast.AST = node
    for outer in script.ancestors(node):
        if isinstance(outer, ast.If) and child in outer.body:
            found.add(script.text(outer.test, 120))
        child = outer
    return found


def ruled_out(script: Script, node: ast.AST, conditions: set[str]) -> bool:
    """Whether `node` runs only where one of `conditions` is false: in the `else` of `if C:`, under
    `if not C:`, or after `assert not C` (or `if C: raise`) earlier in a block that holds it."""
    if not conditions:
        return False
    child: ast.AST = node
    for outer in script.ancestors(node):
        if isinstance(outer, ast.If):
            test = outer.test
            if child in outer.orelse and script.text(test, 120) in conditions:
                return True
            if (
                child in outer.body
                and isinstance(test, ast.UnaryOp)
                and isinstance(test.op, ast.Not)
                and script.text(test.operand, 120) in conditions
            ):
                return True
        for block in ("body", "orelse", "finalbody"):
            statements = getattr(outer, block, None)
            if (
                isinstance(statements, list)
                and child in statements
                and any(_precludes(script, s, conditions) for s in statements[: statements.index(child)])
            ):
                return True
        child = outer
    return False


def _precludes(script: Script, statement: ast.stmt, conditions: set[str]) -> bool:
    if isinstance(statement, ast.Assert):
        test = statement.test
        return (
            isinstance(test, ast.UnaryOp)
            and isinstance(test.op, ast.Not)
            and script.text(test.operand, 120) in conditions
        )
    return (
        isinstance(statement, ast.If)
        and script.text(statement.test, 120) in conditions
        and bool(statement.body)
        and isinstance(statement.body[-1], ast.Raise)
    )
