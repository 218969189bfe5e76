"""Which code of a script runs once per rank, and which once in the parent that starts the ranks.

Under torchrun every line runs in every rank's process. With `mp.spawn` (or `multiprocessing`,
`torch_xla`, `notebook_launcher`) only the spawned function and what it calls run per rank; the
code that starts the workers runs once.
"""

from __future__ import annotations

import ast

from triage.core.lint.script import FunctionNode, Script, dotted


class RankProcesses:
    """The functions a script spawns per rank, and whether a node runs in every rank's process."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.spawn_targets: dict[str, FunctionNode] = self._spawn_targets()
        self.launcher_functions = self._launcher_functions()
        self.passed_elsewhere = self._passed_elsewhere()

    def _passed_elsewhere(self) -> set[tuple[ast.AST, str]]:
        """Parameters with a default that no call in this file passes, of functions this file does
        call (`train_model(None)` under `__main__`, the rank left at None) and of constructors of
        classes it never builds: whatever rank the distributed path gets comes from a caller in
        another module, read as the process index an mp.spawn worker there hands on (as
        `spawned_index`)."""
        passed: dict[FunctionNode, set[str]] = {}
        for call in self.script.call_list:
            function = self.script.local_function(call.node)
            if function is None:
                continue
            names = passed.setdefault(function, set())
            params = [a.arg for a in function.args.posonlyargs + function.args.args]
            if params and params[0] in ("self", "cls") and isinstance(call.node.func, ast.Attribute):
                params = params[1:]
            names.update(params[: len(call.node.args)])
            names.update(k.arg for k in call.node.keywords if k.arg is not None)
            if any(isinstance(a, ast.Starred) for a in call.node.args) or any(
                k.arg is None for k in call.node.keywords
            ):
                names.update(params)
        # Handed to init_process_group(rank=...) in the function itself: it says it is the global rank.
        grouped = {
            (call.scope, k.value.id)
            for call in self.script.call_list
            if call.tail == "init_process_group"
            for k in call.node.keywords
            if k.arg == "rank" and isinstance(k.value, ast.Name)
        }
        # A class this file never builds (`Trainer(rank=0, ...)`, built by the CLI module that
        # mp.spawns the workers): its constructor's rank comes from that caller, as above.
        built = {c.tail for c in self.script.call_list}
        for function in self.script.functions.get("__init__", []):
            owner = self.script.parents.get(function)
            if isinstance(owner, ast.ClassDef) and owner.name not in built:
                passed.setdefault(function, set())
        found: set[tuple[ast.AST, str]] = set()
        for called, names in passed.items():
            positional = called.args.posonlyargs + called.args.args
            defaulted = positional[len(positional) - len(called.args.defaults) :]
            found.update(
                (called, a.arg) for a in defaulted if a.arg not in names and (called, a.arg) not in grouped
            )
        return found

    def _spawn_targets(self) -> dict[str, FunctionNode]:
        targets: dict[str, FunctionNode] = {}
        for call in self.script.calls("spawn", "start_processes", "Process", "notebook_launcher"):
            if not (
                call.name.startswith(("torch.multiprocessing", "multiprocessing", "torch_xla"))
                or call.tail == "notebook_launcher"
            ):
                continue
            fn = call.kwarg("target") or call.kwarg("fn") or call.kwarg("function")
            if fn is None and call.node.args:
                fn = call.node.args[0]
            if isinstance(fn, ast.Name) and fn.id in self.script.functions:
                targets[fn.id] = self.script.functions[fn.id][0]
        return targets

    def _launcher_functions(self) -> set[ast.AST]:
        """With mp.spawn, the code that starts the workers runs once, not once per rank."""
        if not self.spawn_targets:
            return self._subprocess_launchers()
        per_rank: set[str] = set()
        todo = list(self.spawn_targets)
        while todo:
            name = todo.pop()
            if name in per_rank or name not in self.script.functions:
                continue
            per_rank.add(name)
            for node in ast.walk(self.script.functions[name][0]):
                if isinstance(node, ast.Call):
                    local = self.script.local_function(node)
                    if local is not None:
                        todo.append(local.name)
        launching: set[ast.AST] = {self.script.tree}
        for name, defs in self.script.functions.items():
            if name not in per_rank:
                launching.update(defs)
        return launching

    def _subprocess_launchers(self) -> set[ast.AST]:
        """A function that starts the workers as new Python interpreters (`subprocess.Popen(
        [sys.executable, "train.py", f"--rank={i}"])`, as NVIDIA's waveglow
        `distributed.py` does) is the parent: it and the module that calls it run once."""
        launchers: set[ast.AST] = set()
        for call in self.script.calls("Popen", "run", "call", "check_call"):
            if not call.name.startswith("subprocess."):
                continue
            if not any(dotted(node) == "sys.executable" for node in ast.walk(call.node)):
                continue
            scope = self.script.scope_of(call.node)
            if isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
                launchers.update((scope, self.script.tree))
        return launchers

    def per_rank(self, node: ast.AST) -> bool:
        """Whether this code runs in every rank's process (not in an mp.spawn parent)."""
        if not self.launcher_functions:
            return True
        for scope in (node, *self.script.ancestors(node)):
            if isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef) and scope.name in self.spawn_targets:
                return True
            if (
                isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef | ast.Module)
                and scope not in self.launcher_functions
            ):
                return True
        return False

    def spawned_index(self, name: str, scope: ast.AST) -> bool:
        """The first parameter of a function started by mp.spawn is its local process index."""
        if not isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
            return False
        if self.spawn_targets.get(scope.name) is not scope:
            return False
        params = scope.args.posonlyargs + scope.args.args
        return bool(params) and params[0].arg == name
