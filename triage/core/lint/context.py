"""Everything a check needs about one script, built once: the tree, the ranks and the wrappers."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from triage.core.lint.model import Finding, Rule
from triage.core.lint.ranks import RankModel
from triage.core.lint.script import Scope, Script
from triage.core.lint.wrappers import Wrappers


@dataclass(frozen=True)
class LaunchFacts:
    """What the files around a script say about how it is launched (MN5 reads it)."""

    max_restarts: int = 0
    where: str = ""  # "run.sh:3" for the message


@dataclass
class Context:
    """What a lint rule sees: the parsed script, its rank model and wrappers."""

    script: Script
    ranks: RankModel
    wrappers: Wrappers
    launch: LaunchFacts = field(default_factory=LaunchFacts)

    @classmethod
    def build(cls, script: Script, launch: LaunchFacts | None = None) -> Context:
        return cls(script, RankModel(script), Wrappers(script), launch or LaunchFacts())

    def finding(self, rule: Rule, node: ast.AST, message: str) -> Finding:
        line = getattr(node, "lineno", 1)
        col = getattr(node, "col_offset", 0) + 1
        return Finding(rule.code, rule.entry, rule.severity, self.script.path, line, col, message)

    def scope(self, node: ast.AST) -> Scope:
        return self.script.scope_of(node)

    def function_of(self, node: ast.AST) -> ast.AST:
        """The innermost function (or the module) a node belongs to: where pairing and flow live."""
        return self.script.scope_of(node)
