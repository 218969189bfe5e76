"""A parsed training script and the name resolution every check shares.

`Script` holds the syntax tree, a parent link for every node, the import aliases (so `dist.barrier`
resolves to `torch.distributed.barrier` and `DDP` to `torch.nn.parallel.DistributedDataParallel`),
the functions defined in the file, and which frameworks the script uses. Whether a piece of code
runs on some ranks only, and what a name holds, are in `ranks` and `wrappers`; this module knows
nothing of either.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TypeVar

from triage.core import launchers
from triage.core.lint.rank_terms import MAIN_NAMES, main_decorator
from triage.core.lint.snippets import bound_names, implicit_frameworks, implicit_imports
from triage.core.lint.source import parse

Scope = ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef
T = TypeVar("T", bound=ast.AST)

# Framework markers: the first component of a resolved name, or a resolved name, and what it means.
_FRAMEWORK_ROOTS = {
    "deepspeed": "deepspeed",
    "accelerate": "accelerate",
    "lightning": "lightning",
    "pytorch_lightning": "lightning",
    "horovod": "horovod",
}
SPAWNERS = frozenset({"spawn", "start_processes"})
# What a single-process script imports from these frameworks (a checkpoint converter's
# `from accelerate import init_empty_weights`, DeepSpeed's fused optimizers): no processes.
_SINGLE_PROCESS_IMPORTS = (
    "accelerate.init_empty_weights",
    "accelerate.init_on_device",
    "accelerate.load_checkpoint_and_dispatch",
    "accelerate.dispatch_model",
    "accelerate.infer_auto_device_map",
    "accelerate.cpu_offload",
    "accelerate.disk_offload",
    "accelerate.utils",
    "accelerate.hooks",
    "accelerate.big_modeling",
    "deepspeed.ops",
    "deepspeed.utils.zero_to_fp32",
    "deepspeed.accelerator",
    "deepspeed.profiling",
    # reading a distributed checkpoint in one process (a converter)
    "torch.distributed.checkpoint.FileSystemReader",
    "torch.distributed.checkpoint.format_utils",
    "torch.distributed.checkpoint.state_dict_loader._load_state_dict_from_keys",
)


def _project_setup_helper(target: str) -> bool:
    """`from src.post_training.distributed import ddp_setup, ddp_wrap`: the project's own helpers
    that start or wrap the distributed run say the script runs as several processes, and so does
    its decorator that keeps a function to the main process (speechbrain's `main_process_only`),
    and its test of the main process (`from axolotl.utils.distributed import is_main_process`): a
    module that asks whether it is rank 0 runs where there are other ranks."""
    *module, name = target.lower().split(".")
    if not module or module[0] in ("torch", "accelerate", "deepspeed", "lightning", "pytorch_lightning"):
        return False
    if main_decorator(name) or name in MAIN_NAMES:
        return True
    words = name.split("_")
    return "ddp" in words or name.startswith(("init_dist", "setup_dist", "dist_init", "init_distributed"))


def _single_process_import(target: str) -> bool:
    return target.startswith(_SINGLE_PROCESS_IMPORTS)


# Reading any launcher's rank or world-size variable means the script runs under a launcher.
_RANK_ENV = frozenset(
    {*launchers.RANK, *launchers.LOCAL_RANK, *launchers.WORLD_SIZE, *launchers.LOCAL_WORLD_SIZE}
)


@dataclass(frozen=True)
class Call:
    """A call with its resolved callee (`torch.distributed.barrier`, `accelerator.wait_for_everyone`)."""

    node: ast.Call
    name: str  # resolved dotted name, "" when the callee is not a plain name/attribute chain
    scope: Scope
    tail: str = ""  # the last part of `name`: `barrier` for `torch.distributed.barrier`

    def __post_init__(self) -> None:
        tail = self.name.rsplit(".", 1)[-1]
        if not tail and isinstance(self.node.func, ast.Attribute):
            tail = self.node.func.attr  # `self.sampler["train"].set_epoch(...)`: a method all the same
        object.__setattr__(self, "tail", tail)

    @property
    def receiver(self) -> ast.expr | None:
        func = self.node.func
        return func.value if isinstance(func, ast.Attribute) else None

    def kwarg(self, name: str) -> ast.expr | None:
        for keyword in self.node.keywords:
            if keyword.arg == name:
                return keyword.value
        return None

    def has_star_kwargs(self) -> bool:
        return any(keyword.arg is None for keyword in self.node.keywords)


def _position(node: ast.AST) -> tuple[int, int]:
    return getattr(node, "lineno", 0), getattr(node, "col_offset", 0)


def dotted(expr: ast.AST) -> str:
    """`self.model`, `args.local_rank`: the literal text of a name or attribute chain, else ""."""
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        base = dotted(expr.value)
        return f"{base}.{expr.attr}" if base else ""
    return ""


def const_int(expr: ast.AST) -> int | None:
    """The integer an expression is written as, or None."""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, int) and not isinstance(expr.value, bool):
        return expr.value
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub):
        inner = const_int(expr.operand)
        return -inner if inner is not None else None
    return None


class Script:
    """One file's tree with its parents, imports, functions, calls and frameworks."""

    def __init__(self, source: str, path: str, tree: ast.Module | None = None) -> None:
        self.source = source
        self.path = path
        self.tree = tree if tree is not None else parse(source, path)
        self.lines = source.splitlines()
        self._encoded: list[bytes] | None = None
        self.cache: dict[str, object] = {}  # per-script results the checks share (WorldSize)
        self.parents: dict[ast.AST, ast.AST] = {}
        self.imports: dict[str, str] = {}
        self.functions: dict[str, list[FunctionNode]] = {}
        self.classes: dict[str, ast.ClassDef] = {}
        self.call_list: list[Call] = []
        # Every identifier the code uses (names, attributes, keywords, definitions) and every string
        # literal: "does this script mention no_sync" without matching comments or docstrings.
        self.words: set[str] = set()
        self.strings: set[str] = set()
        # One walk of the tree: every node's function (or module) and every node by type, so the
        # checks never walk the whole tree again.
        self._scopes: dict[ast.AST, Scope] = {}
        self._by_type: dict[type[ast.AST], list[ast.AST]] = {}
        self._implied: set[str] = set()  # frameworks a snippet's unbound objects imply
        self._index()
        self.frameworks = self._frameworks()

    # -- indexing --------------------------------------------------------------------------

    def _index(self) -> None:
        # One pass over every node, dispatching on the exact type (faster than isinstance chains,
        # which matters: this loop is most of the time a lint takes).
        stack: list[tuple[ast.AST, Scope]] = [(self.tree, self.tree)]
        raw_calls: list[tuple[ast.Call, Scope]] = []
        parents, scopes, by_type = self.parents, self._scopes, self._by_type
        words, strings = self.words, self.strings
        function_types = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
        pop, push = stack.pop, stack.append
        while stack:
            node, scope = pop()
            kind = type(node)
            scopes[node] = scope
            bucket = by_type.get(kind)
            if bucket is None:
                by_type[kind] = [node]
            else:
                bucket.append(node)
            if kind is ast.Name:
                words.add(node.id)  # type: ignore[attr-defined]
                continue  # a Name's only child is its context
            if kind is ast.Call:
                raw_calls.append((node, scope))  # type: ignore[arg-type]
            elif kind is ast.Attribute:
                words.add(node.attr)  # type: ignore[attr-defined]
            elif kind is ast.Constant:
                value = node.value  # type: ignore[attr-defined]
                if isinstance(value, str) and len(value) < 200:
                    strings.add(value)
                continue
            elif kind is ast.keyword:
                if node.arg:  # type: ignore[attr-defined]
                    words.add(node.arg)  # type: ignore[attr-defined]
            elif kind in function_types:
                if kind is not ast.Lambda:
                    self.functions.setdefault(node.name, []).append(node)  # type: ignore[attr-defined,arg-type]
                    words.add(node.name)  # type: ignore[attr-defined]
            elif kind is ast.ClassDef:
                self.classes.setdefault(node.name, node)  # type: ignore[attr-defined,arg-type]
            elif kind is ast.Import or kind is ast.ImportFrom:
                self._import(node)  # type: ignore[arg-type]
            inner: Scope = node if kind in function_types else scope  # type: ignore[assignment]
            for field in node._fields:
                value = getattr(node, field, None)
                if type(value) is list:
                    for item in value:
                        if isinstance(item, ast.AST):
                            parents[item] = node
                            push((item, inner))
                elif isinstance(value, ast.AST):
                    parents[value] = node
                    push((value, inner))
        for nodes in by_type.values():
            nodes.sort(key=_position)
        defined = set(self.functions) | set(self.classes)
        names = [*by_type.get(ast.Name, []), *by_type.get(ast.arg, [])]
        bound = bound_names(names, defined, self.imports)
        fragment = not self.imports
        self.imports.update(implicit_imports(names, bound))  # a pasted snippet's
        self._implied = implicit_frameworks(by_type.get(ast.Attribute, []), bound, fragment)
        raw_calls.sort(key=lambda item: (item[0].lineno, item[0].col_offset))
        self.call_list = [Call(node, self.qual(node.func) or "", scope) for node, scope in raw_calls]

    def _import(self, node: ast.Import | ast.ImportFrom) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    self.imports[alias.asname] = alias.name
                else:
                    root = alias.name.split(".", 1)[0]
                    self.imports[root] = root
            return
        module = "." * node.level + (node.module or "")
        for alias in node.names:
            if alias.name != "*":
                self.imports[alias.asname or alias.name] = f"{module}.{alias.name}"
                self.words.add(alias.name)

    def _frameworks(self) -> frozenset[str]:
        found: set[str] = set(self._implied)
        for target in self.imports.values():
            if _project_setup_helper(target):
                found.add("torch.distributed")
            root = target.split(".", 1)[0]
            if root in _FRAMEWORK_ROOTS and not _single_process_import(target):
                found.add(_FRAMEWORK_ROOTS[root])
            if (
                target.startswith(("torch.distributed", "torch.nn.parallel"))
                or target.endswith("DistributedSampler")
            ) and not _single_process_import(target):
                found.add("torch.distributed")
            if target.startswith("transformers.") and target.rsplit(".", 1)[-1] in MAIN_NAMES:
                found.add("hf_trainer")  # HF examples' `is_main_process(training_args.local_rank)`
        for call in self.call_list:
            name = call.name
            if (
                name.startswith(("torch.distributed.", "torch.nn.parallel."))
                or (name.startswith("torch.") and call.tail == "DistributedSampler")
            ) and not _single_process_import(name):
                found.add("torch.distributed")
            elif call.tail in SPAWNERS and name.startswith("torch.multiprocessing"):
                found.add("spawn")
            elif call.tail == "no_sync" and call.receiver is not None and not call.node.args:
                found.add("torch.distributed")  # `model.no_sync()`: only a DDP/FSDP model has it
            elif name == "transformers.Trainer" or name.endswith(".Seq2SeqTrainer"):
                found.add("hf_trainer")
            elif call.tail in ("getenv", "get") or name.endswith("environ.get"):
                key = call.node.args[0] if call.node.args else None
                if isinstance(key, ast.Constant) and key.value in _RANK_ENV:
                    found.add("env")
        for node in self.of_type(ast.Subscript):
            if (
                isinstance(node, ast.Subscript)
                and dotted(node.value).endswith("environ")
                and isinstance(node.slice, ast.Constant)
                and node.slice.value in _RANK_ENV
            ):
                found.add("env")
        if "lightning" in found and self._one_device():
            found.discard("lightning")
        return frozenset(found)

    def _one_device(self) -> bool:
        """Every Fabric / Trainer here runs on one device (`devices=1`): one process, a utility."""
        made = [
            c for c in self.call_list if c.tail in ("Fabric", "Trainer") and "lightning" in c.name.lower()
        ]
        return bool(made) and all(const_int(c.kwarg("devices") or ast.Constant(None)) == 1 for c in made)

    @property
    def distributed(self) -> bool:
        """Whether this script runs as several processes at all (a plain script gets no findings)."""
        return bool(self.frameworks)

    # -- names -----------------------------------------------------------------------------

    def qual(self, expr: ast.AST) -> str | None:
        """The resolved dotted name of a name/attribute chain; a call in the chain reads `f()`."""
        if isinstance(expr, ast.Name):
            return self.imports.get(expr.id, expr.id)
        if isinstance(expr, ast.Attribute):
            base = self.qual(expr.value)
            return f"{base}.{expr.attr}" if base else None
        if isinstance(expr, ast.Call):
            base = self.qual(expr.func)
            return f"{base}()" if base else None
        return None

    def of_type(self, kind: type[T]) -> list[T]:
        """Every node of one type in the file, in source order."""
        return self._by_type.get(kind, [])  # type: ignore[return-value]

    def scope_of(self, node: ast.AST) -> Scope:
        known = self._scopes.get(node)
        if known is not None:
            return known
        current = self.parents.get(node)
        while current is not None:
            if isinstance(current, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.Module):
                return current
            current = self.parents.get(current)
        return self.tree

    def statement_of(self, node: ast.AST) -> ast.stmt | None:
        current: ast.AST | None = node
        while current is not None and not isinstance(current, ast.stmt):
            current = self.parents.get(current)
        return current

    def ancestors(self, node: ast.AST) -> Iterator[ast.AST]:
        current = self.parents.get(node)
        while current is not None:
            yield current
            current = self.parents.get(current)

    def enclosing_class(self, node: ast.AST) -> ast.ClassDef | None:
        for parent in self.ancestors(node):
            if isinstance(parent, ast.ClassDef):
                return parent
        return None

    def enclosing_function(self, node: ast.AST) -> FunctionNode | None:
        """The innermost `def` around a node (None at module level; a lambda is not one)."""
        return next((a for a in self.ancestors(node) if isinstance(a, FunctionNode)), None)

    def mentions(self, *words: str) -> bool:
        """Whether the code (not its comments or docstrings) names any of these identifiers."""
        return any(word in self.words for word in words)

    def calls(self, *tails: str) -> Iterator[Call]:
        """Every call whose callee's last name is one of `tails` (all calls with no tails)."""
        wanted = set(tails)
        for call in self.call_list:
            if not wanted or call.tail in wanted:
                yield call

    def local_function(self, call: ast.Call) -> FunctionNode | None:
        """The function of this file that `f(...)` or `self.f(...)` calls, when there is one."""
        func = call.func
        name = ""
        if isinstance(func, ast.Name) and func.id not in self.imports:
            name = func.id
        elif (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id in ("self", "cls")
        ):
            name = func.attr
        defs = self.functions.get(name)
        return defs[0] if defs else None

    def text(self, node: ast.AST, limit: int = 60) -> str:
        """The source of a node on one line, shortened for messages."""
        segment = self._segment(node)
        segment = " ".join(segment.split())
        return segment if len(segment) <= limit else segment[: limit - 3] + "..."

    def _segment(self, node: ast.AST) -> str:
        # ast.get_source_segment splits the whole source on every call; column offsets are UTF-8
        # byte offsets, so slice the encoded lines.
        start, end = getattr(node, "lineno", None), getattr(node, "end_lineno", None)
        first, last = getattr(node, "col_offset", None), getattr(node, "end_col_offset", None)
        if start is None or end is None or first is None or last is None or end > len(self.lines):
            return ""
        if self._encoded is None:
            self._encoded = [line.encode("utf-8") for line in self.lines]
        rows = self._encoded[start - 1 : end]
        if len(rows) == 1:
            return rows[0][first:last].decode("utf-8", "replace")
        parts = [rows[0][first:], *rows[1:-1], rows[-1][:last]]
        return "\n".join(p.decode("utf-8", "replace") for p in parts)

    def line_text(self, line: int) -> str:
        return self.lines[line - 1] if 0 < line <= len(self.lines) else ""

    def names_in(self, expr: ast.AST) -> set[str]:
        """Every dotted name read in an expression (`args.lr`, `world_size`)."""
        found = set()
        for node in ast.walk(expr):
            if isinstance(node, ast.Name | ast.Attribute):
                text = dotted(node)
                if text:
                    found.add(text)
        return found
