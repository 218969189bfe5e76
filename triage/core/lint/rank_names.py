"""How a script's rank names, rank helpers, rank parameters and rank flags are collected.

`RankModel` (in `ranks`) reads a value or a condition; this half walks the script's bindings,
returns and calls and records what they hold, in a few rounds until names built from names settle.
"""

from __future__ import annotations

import ast

from triage.core.lint.rank_gates import RankGates
from triage.core.lint.rank_processes import RankProcesses
from triage.core.lint.rank_terms import RankKind, Side, unset_test
from triage.core.lint.script import FunctionNode, Scope, Script, dotted


class RankNames:
    """The tables `RankModel` reads, and how they are filled from the script."""

    script: Script
    values: dict[Scope, dict[str, str]]  # name -> RankKind
    preds: dict[Scope, dict[str, str]]  # name -> Side
    rank_functions: dict[str, RankKind]
    pred_functions: dict[str, Side]
    param_kinds: dict[tuple[ast.AST, str], RankKind]
    processes: RankProcesses
    gates: RankGates

    def rank_kind(self, expr: ast.AST, scope: Scope) -> RankKind | None:
        raise NotImplementedError

    def side(self, test: ast.AST, scope: Scope) -> Side | None:
        raise NotImplementedError

    def _collect_names(self) -> None:
        script = self.script
        self._local_rank_options()
        bindings: list[ast.Assign | ast.AnnAssign | ast.NamedExpr] = [
            *script.of_type(ast.Assign),
            *script.of_type(ast.AnnAssign),
            *script.of_type(ast.NamedExpr),
        ]
        for node in bindings:
            if isinstance(node, ast.Assign):
                value, targets = node.value, node.targets
            elif node.value is not None:
                value, targets = node.value, [node.target]
            else:
                continue
            scope = self.script.scope_of(node)
            for target in targets:
                if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple):
                    for sub_target, sub_value in zip(target.elts, value.elts, strict=False):
                        self._bind(sub_target, sub_value, scope)
                elif isinstance(target, ast.Tuple) and target.elts and isinstance(value, ast.Call):
                    local = self.script.local_function(value)
                    callee = self.script.qual(value.func) or ""
                    if local is not None:  # `a, rank, b = setup()`: the tuple `setup` returns, by position
                        self._bind_returned(target, local)
                    elif callee.endswith("get_dist_info") and (
                        len(target.elts) == 2 or "rank" in dotted(target.elts[0]).lower()
                    ):  # mmcv/mmengine: rank, world_size = get_dist_info(); not nanochat's
                        # `ddp, rank, local_rank, world = get_dist_info()` imported from its package
                        self._store(self.values, target.elts[0], "global", scope)
                else:
                    self._bind(target, value, scope)

    def _local_rank_options(self) -> None:
        """`parser.add_argument("--rank", "--local_rank")`: the launcher passes the local rank, so
        `args.rank` holds it, whatever the first option is called."""
        options = [
            call
            for call in self.script.calls("add_argument")
            if any(
                isinstance(a, ast.Constant) and str(a.value).lstrip("-").replace("-", "_") == "local_rank"
                for a in call.node.args
            )
        ]
        holders = {
            dotted(target)
            for node in self.script.of_type(ast.Assign)
            if isinstance(node.value, ast.Call) and dotted(node.value.func).endswith("parse_args")
            for target in node.targets
            if isinstance(target, ast.Name)
        }
        for call in options:
            dest = call.kwarg("dest")
            longs = [
                str(a.value)
                for a in call.node.args
                if isinstance(a, ast.Constant) and str(a.value).startswith("--")
            ]
            name = (
                str(dest.value)
                if isinstance(dest, ast.Constant)
                else longs[0][2:].replace("-", "_")
                if longs
                else ""
            )
            for holder in holders:
                self.values.setdefault(self.script.tree, {})[f"{holder}.{name}"] = "local"

    def _bind_returned(self, target: ast.Tuple, function: FunctionNode) -> None:
        """Bind each name of `target` to what `function` returns at its position, where every
        tuple it returns agrees (`return True, rank, ...` and `return False, 0, ...`)."""
        scope = self.script.scope_of(target)
        kinds: list[set[RankKind | None]] = [set() for _ in target.elts]
        for node in ast.walk(function):
            if isinstance(node, ast.Return) and isinstance(node.value, ast.Tuple):
                for i, (elt, returned) in enumerate(zip(target.elts, node.value.elts, strict=False)):
                    if not isinstance(elt, ast.Starred):
                        kinds[i].add(self.rank_kind(returned, function))
        for elt, found in zip(target.elts, kinds, strict=True):
            known = [k for k in found if k is not None]
            if len(set(known)) == 1:
                self._store(self.values, elt, known[0], scope)

    def _bind(self, target: ast.AST, value: ast.AST, scope: Scope) -> None:
        kind = self.rank_kind(value, scope)
        if kind is not None:
            self._store(self.values, target, kind, scope)
            return
        side = self.side(value, scope)
        if side is not None:
            self._store(self.preds, target, side, scope)

    def _store(self, table: dict[Scope, dict[str, str]], target: ast.AST, value: str, scope: Scope) -> None:
        if isinstance(target, ast.Name):
            key, where = target.id, scope
        elif isinstance(target, ast.Attribute) and dotted(target):
            key, where = dotted(target), self.script.tree
        else:
            return
        names = table.setdefault(where, {})
        # `rank = LOCAL_RANK if set, else RANK`: under torchrun it is the local rank; a name bound to
        # both kinds is not claimed to be the global one; nor `if local_rank == -1: local_rank = rank`.
        unset = any(isinstance(a, ast.If) and unset_test(a.test, key) for a in self.script.ancestors(target))
        if table is self.values and value == "global" and (names.get(key) == "local" or unset):
            return
        names[key] = value

    def _collect_functions(self) -> None:
        returns: dict[ast.AST, list[ast.Return]] = {}
        for node in self.script.of_type(ast.Return):
            returns.setdefault(self.script.scope_of(node), []).append(node)
        for name, defs in self.script.functions.items():
            function = defs[0]
            for node in returns.get(function, []):
                if node.value is not None:
                    kind = self.rank_kind(node.value, function)
                    if kind is not None:
                        self.rank_functions[name] = kind
                        break
                    side = self.side(node.value, function)
                    if side is not None:
                        self.pred_functions[name] = side
                        break

    def _collect_params(self) -> None:
        """A parameter that every call in this file passes the same kind of rank is that kind:
        `ddp_setup(rank, ...)` called from an mp.spawn worker with its local index."""
        seen: dict[tuple[ast.AST, str], set[RankKind | None]] = {}
        for call in self.script.call_list:
            function = self.script.local_function(call.node)
            if function is None:
                continue
            params = [a.arg for a in function.args.posonlyargs + function.args.args]
            if params and params[0] in ("self", "cls") and isinstance(call.node.func, ast.Attribute):
                params = params[1:]
            pairs = list(zip(params, call.node.args, strict=False))
            pairs += [(k.arg, k.value) for k in call.node.keywords if k.arg in params]
            for param, arg in pairs:
                seen.setdefault((function, param), set()).add(self.rank_kind(arg, call.scope))
        for key, kinds in seen.items():
            if len(kinds) == 1 and None not in kinds:
                self.param_kinds[key] = kinds.pop()  # type: ignore[assignment]

    def _collect_flags(self) -> bool:
        """`save = False` ... `if rank == 0: save = True` ... `if save:`: a flag only ever set True
        under one rank condition (and otherwise only False) holds on those ranks alone."""
        bound: dict[tuple[Scope, str], list[tuple[bool, Side | None]]] = {}
        for node in self.script.of_type(ast.Assign):
            for target in node.targets:
                if not isinstance(target, ast.Name):
                    continue
                key = (self.script.scope_of(node), target.id)
                value = node.value
                if not (isinstance(value, ast.Constant) and isinstance(value.value, bool)):
                    bound.setdefault(key, []).append((True, None))  # anything else: not a flag
                    continue
                gate = self.gates.gate(node)
                bound.setdefault(key, []).append((value.value, gate.side if gate else None))
        found = False
        for (scope, name), values in bound.items():
            sides = {side for value, side in values if value}
            if len(sides) == 1 and None not in sides and any(not value for value, _ in values):
                self.preds.setdefault(scope, {})[name] = sides.pop()  # type: ignore[assignment]
                found = True
        return found
