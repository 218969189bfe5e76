"""What a name holds when a wrapper made it: a DDP, FSDP or FSDP2 model, a DeepSpeed engine, an
Accelerate-prepared object, an Accelerator, a Lightning or Hugging Face trainer.

`model = DDP(model, ...)`, `model = FSDP(...)`, `fully_shard(model)`, `engine, opt, _, _ =
deepspeed.initialize(...)`, `model, opt = accelerator.prepare(model, opt)`, `trainer = Trainer(...)`
bind names; `torch.compile(...)` around a wrapper keeps what it wraps. Plain names are looked up
in their function first, then the module; attribute targets (`self.model`) hold for the file.
"""

from __future__ import annotations

import ast
from typing import Literal

from triage.core.lint.script import Call, Scope, Script, dotted

Kind = Literal[
    "ddp",
    "fsdp",
    "fsdp2",
    "deepspeed",
    "prepared",
    "accelerator",
    "lightning_trainer",
    "hf_trainer",
    "fabric",
]

_WRAPPER_TAILS: dict[str, Kind] = {
    "DistributedDataParallel": "ddp",
    "FullyShardedDataParallel": "fsdp",
}
_TORCH_ROOTS = ("torch.", "fairscale.")


def wrapper_kind(script: Script, call: ast.Call) -> Kind | None:
    """What the object a call returns is, when the call is a known wrapper or constructor."""
    name = script.qual(call.func) or ""
    tail = name.rsplit(".", 1)[-1]
    if tail in _WRAPPER_TAILS and name.startswith(_TORCH_ROOTS):
        return _WRAPPER_TAILS[tail]
    if tail in ("DDP", "FSDP") and name.startswith(_TORCH_ROOTS):  # aliased on import
        return "ddp" if tail == "DDP" else "fsdp"
    if tail == "fully_shard" and name.startswith("torch."):
        return "fsdp2"
    if tail == "Accelerator" and name.startswith("accelerate"):
        return "accelerator"
    if tail == "Trainer" and name.startswith(("lightning", "pytorch_lightning")):
        return "lightning_trainer"
    if tail == "Fabric" and name.startswith("lightning"):
        return "fabric"
    if tail in ("Trainer", "Seq2SeqTrainer", "SFTTrainer") and name.startswith(("transformers", "trl")):
        return "hf_trainer"
    if tail == "compile" and name.startswith("torch") and call.args and isinstance(call.args[0], ast.Call):
        return wrapper_kind(script, call.args[0])
    if _project_ddp_wrapper(tail) and not name.startswith("torch.") and tail not in script.functions:
        return "ddp"  # the project's own `ddp_wrap(model, ctx)`, imported from its distributed helpers
    return None


def _project_ddp_wrapper(tail: str) -> bool:
    lowered = tail.lower()
    return "ddp" in lowered.split("_") and ("wrap" in lowered or lowered.startswith("to_"))


class Wrappers:
    """The kind of every name a wrapper bound, per function (plain names) or per file (attributes)."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.names: dict[Scope, dict[str, Kind]] = {}
        self.first_wrap: dict[tuple[Scope, str], int] = {}  # the line a plain name is first wrapped on
        self.attributes: dict[str, Kind] = {}
        self.sites: dict[Kind, list[ast.Call]] = {}
        self._resolving: set[tuple[int, str]] = set()  # parameters being traced to their callers
        self._traced: dict[tuple[int, str], Kind | None] = {}
        self._calls_of: dict[int, list[Call]] | None = None
        self._conditional: dict[tuple[int, str], list[ast.IfExp]] | None = None
        self._collect()

    def _collect(self) -> None:
        script = self.script
        for call in script.call_list:
            kind = wrapper_kind(script, call.node)
            if call.tail == "initialize" and call.name.startswith("deepspeed"):
                kind = "deepspeed"
            elif call.tail == "prepare" and self._is_accelerator(call.receiver, call.scope):
                kind = "prepared"
            if kind is None:
                continue
            self.sites.setdefault(kind, []).append(call.node)
            parent = script.parents.get(call.node)
            if kind == "fsdp2" and isinstance(parent, ast.Expr) and call.node.args:
                self._bind(call.node.args[0], kind, call.scope)  # fully_shard(model) wraps in place
                continue
            if isinstance(parent, ast.Call) and script.qual(parent.func) in ("torch.compile",):
                parent = script.parents.get(parent)
            if not isinstance(parent, ast.Assign):
                continue
            args = call.node.args
            for target in parent.targets:
                if kind in ("deepspeed", "prepared") and isinstance(target, ast.Tuple):
                    if kind == "deepspeed" and target.elts:
                        self._bind(target.elts[0], kind, call.scope)
                    else:
                        for index, element in enumerate(target.elts):
                            if not (
                                kind == "prepared" and index < len(args) and self._frozen(args[index], call)
                            ):
                                self._bind(element, kind, call.scope)
                elif not (kind == "prepared" and len(args) == 1 and self._frozen(args[0], call)):
                    self._bind(target, kind, call.scope)

    def _frozen(self, model: ast.expr, prepare: Call) -> bool:
        """A model frozen whole before `accelerator.prepare` (the last `model.requires_grad_(...)` above
        it, in its function, says False): Accelerate wraps in DDP only a model with a parameter that
        requires a gradient, so the name it returns is the plain module, whose forward never
        communicates (a frozen LPIPS or CLIP net used for a loss)."""
        name, last = dotted(model), None
        for call in self.script.call_list:
            if (
                call.tail == "requires_grad_"
                and call.scope is prepare.scope
                and call.node.lineno < prepare.node.lineno
                and name
                and call.receiver is not None
                and dotted(call.receiver) == name
                and (last is None or call.node.lineno > last[0])
            ):
                flag = call.node.args[0] if call.node.args else call.kwarg("requires_grad")
                last = (call.node.lineno, isinstance(flag, ast.Constant) and flag.value is False)
        return last is not None and last[1]

    def _bind(self, target: ast.AST, kind: Kind, scope: Scope) -> None:
        if isinstance(target, ast.Name):
            self.names.setdefault(scope, {})[target.id] = kind
            key = (scope, target.id)
            self.first_wrap[key] = min(self.first_wrap.get(key, target.lineno), target.lineno)
        elif isinstance(target, ast.Attribute) and dotted(target):
            self.attributes[dotted(target)] = kind

    def kind(self, expr: ast.AST | None, scope: Scope) -> Kind | None:
        """What `expr` holds, if a wrapper in this file bound it."""
        if expr is None:
            return None
        if isinstance(expr, ast.Name):
            if self._before_wrapping(expr, scope):
                return None
            current: Scope | None = scope
            while current is not None:
                found = self.names.get(current, {}).get(expr.id)
                if found is not None:
                    return found
                current = None if isinstance(current, ast.Module) else self.script.scope_of(current)
            key = (id(scope), expr.id)
            if key not in self._traced:
                self._traced[key] = (
                    self._engine_parameter(expr.id, scope)
                    or self._either_arm(expr.id, scope)
                    or self._from_callers(expr.id, scope)
                )
            return self._traced[key]
        if isinstance(expr, ast.Attribute):
            return self.attributes.get(dotted(expr))
        if isinstance(expr, ast.Call):
            return wrapper_kind(self.script, expr)
        return None

    def _before_wrapping(self, name: ast.Name, scope: Scope) -> bool:
        """`model(x)` above `model = DDP(model)` in the same function, and in no loop that also runs
        the wrapping: there `model` is still the plain module."""
        wrapped = self.first_wrap.get((scope, name.id))
        if wrapped is None or name.lineno >= wrapped:
            return False
        return not any(
            isinstance(outer, ast.For | ast.While) and outer.lineno <= wrapped <= (outer.end_lineno or 0)
            for outer in self.script.ancestors(name)
        )

    def _engine_parameter(self, name: str, scope: Scope) -> Kind | None:
        """A parameter named like a DeepSpeed engine bound elsewhere in the file (`train(model_engine)`)."""
        if not isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
            return None
        if name not in {a.arg for a in scope.args.posonlyargs + scope.args.args + scope.args.kwonlyargs}:
            return None
        engines = {n for table in self.names.values() for n, k in table.items() if k == "deepspeed"}
        return "deepspeed" if name in engines else None

    def _either_arm(self, name: str, scope: Scope) -> Kind | None:
        """`model_to_eval = ema_model if ema_model is not None else model`: the name may hold the
        wrapped model of either arm (bayesian-flow-networks' validate() without EMA)."""
        if not isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
            return None
        if self._conditional is None:
            self._conditional = {}
            for node in self.script.of_type(ast.Assign):
                if isinstance(node.value, ast.IfExp):
                    for target in node.targets:
                        if isinstance(target, ast.Name):
                            owner = id(self.script.scope_of(node))
                            self._conditional.setdefault((owner, target.id), []).append(node.value)
        for value in self._conditional.get((id(scope), name), []):
            for arm in (value.body, value.orelse):
                found = self._guarded(arm, scope)
                if found is not None:
                    return found
        return None

    def _from_callers(self, name: str, scope: Scope) -> Kind | None:
        """A parameter holds what this file's callers pass for it, when every call of the function
        passes the same wrapped object: `train(acc, model, ...)` after `model = acc.prepare(model)`,
        then `validate(model=model)` inside it."""
        if not isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
            return None
        params = [a.arg for a in scope.args.posonlyargs + scope.args.args]
        if name not in params and name not in {a.arg for a in scope.args.kwonlyargs}:
            return None
        kinds: set[Kind | None] = set()
        for call in self._callers().get(id(scope), []):
            positional = (
                params[1:] if params[:1] == ["self"] and isinstance(call.node.func, ast.Attribute) else params
            )
            given = dict(zip(positional, call.node.args, strict=False))
            given.update({k.arg: k.value for k in call.node.keywords if k.arg})
            kinds.add(self._guarded(given[name], call.scope) if name in given else None)
            if len(kinds) > 1:
                return None
        return kinds.pop() if kinds else None

    def _callers(self) -> dict[int, list[Call]]:
        """Every call of a same-file function, by the function (indexed once per script)."""
        if self._calls_of is None:
            self._calls_of = {}
            for call in self.script.call_list:
                local = self.script.local_function(call.node)
                if local is not None:
                    self._calls_of.setdefault(id(local), []).append(call)
        return self._calls_of

    def _guarded(self, expr: ast.expr, scope: Scope) -> Kind | None:
        """`kind()` of an expression in another function, once per (function, text) on the stack."""
        key = (id(scope), ast.dump(expr))
        if key in self._resolving or len(self._resolving) > 8:
            return None
        self._resolving.add(key)
        try:
            return self.kind(expr, scope)
        finally:
            self._resolving.discard(key)

    def _is_accelerator(self, expr: ast.AST | None, scope: Scope) -> bool:
        if expr is None:
            return False
        if self.kind(expr, scope) == "accelerator":
            return True
        text = dotted(expr)
        if text.rsplit(".", 1)[-1] == "accelerator" and "accelerate" in self.script.frameworks:
            return True
        if isinstance(expr, ast.Call):
            name = self.script.qual(expr.func) or ""
            return name.startswith("accelerate") and name.endswith(("PartialState", "AcceleratorState"))
        return False

    def is_accelerator(self, call: Call) -> bool:
        """Whether a method call's receiver is an Accelerator (or Accelerate's process state)."""
        return self._is_accelerator(call.receiver, call.scope)

    def of_kind(self, *kinds: Kind) -> bool:
        return any(self.sites.get(k) for k in kinds)
