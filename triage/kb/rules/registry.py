"""The registry of validation rules: each a small function with its code, what it finds, why it
matters and how to fix it.

A rule is a generator over the validation context (`triage.kb.rules.context.Context`) that
yields a Finding per problem. Register one with `@rule(...)` in a module of this package and
import that module in `triage/kb/rules/__init__.py`; give it a failing fixture in
tests/fixtures/kb/failing/<name>/ (the tests refuse a rule without one).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, NamedTuple

if TYPE_CHECKING:
    from triage.kb.rules.context import Context
    from triage.kb.sources import SourceFile

# The codes users see; several rules may share one. Keep the numbers stable: users search for them.
CODES: dict[str, str] = {
    "KB000": "file cannot be read or parsed",
    "KB001": "target does not resolve",
    "KB002": "cycle in the decision graph",
    "KB003": "entry or node unreachable from the start of the graph",
    "KB004": "unknown probe fact, or a value the fact does not have",
    "KB005": "regular expression does not compile or matches everything",
    "KB006": "inconsistent verify note",
    "KB007": "missing required field",
    "KB008": "field has the wrong type or a value it does not allow",
    "KB009": "id or key has the wrong form, or does not match the file name",
    "KB010": "duplicate id",
    "KB011": "too few items (symptom phrasings, options, branches)",
    "KB012": "unknown section",
    "KB013": "unknown field",
    "KB014": "probe node branches on a fact it cannot branch on",
    "KB015": "bad reference or related id",
    "KB016": "a generated file is stale (compiled.json, schema.json, the README's schema section)",
    "KB017": "duplicate key in a mapping",
    "KB018": "probe node falls back to something that is not a question",
    "KB019": "signature without a real example line, or an example its pattern does not match",
    "KB020": "regular expression can take more than linear time (catastrophic backtracking)",
}

# "sources" rules check the YAML; "outputs" rules check the files generated from a valid knowledge
# base, and run only in `triage kb check`.
Stage = Literal["sources", "outputs"]


class Finding(NamedTuple):
    """One problem a rule found: where (file, line, field), what, and optionally a specific fix."""

    file: SourceFile | str
    line: int
    field: str
    message: str
    hint: str = ""  # how to fix this occurrence; the rule's `fix` when empty


@dataclass(frozen=True)
class Diagnostic:
    """A finding as users see it: code, file:line, field, message and fix."""

    code: str
    file: str
    line: int
    field: str
    message: str
    hint: str = ""
    rule: str = ""

    def format(self) -> str:
        """One line: `file:line: KB005 field: message. Fix: hint`."""
        where = f"{self.file}:{self.line}" if self.line else self.file
        field = f" {self.field}:" if self.field else ""
        hint = f" Fix: {self.hint}" if self.hint else ""
        return f"{where}: {self.code}{field} {self.message}.{hint}"


Check = Callable[["Context"], Iterator[Finding]]


@dataclass(frozen=True)
class Rule:
    """A registered rule."""

    code: str
    name: str
    finds: str  # what it finds, one line
    why: str  # why it matters
    fix: str  # how to fix it
    check: Check
    stage: Stage = "sources"

    def run(self, ctx: Context) -> list[Diagnostic]:
        """The rule's findings on `ctx` as diagnostics."""
        found = []
        for finding in self.check(ctx):
            file = finding.file if isinstance(finding.file, str) else finding.file.rel
            hint = finding.hint or self.fix
            found.append(
                Diagnostic(self.code, file, finding.line, finding.field, finding.message, hint, self.name)
            )
        return found


RULES: list[Rule] = []


def rule(
    code: str, name: str, *, finds: str, why: str, fix: str, stage: Stage = "sources"
) -> Callable[[Check], Check]:
    """Register the decorated generator as a rule."""
    if code not in CODES:
        raise ValueError(f"rule {name}: {code} is not in CODES")
    if any(r.name == name for r in RULES):
        raise ValueError(f"rule {name} is registered twice")

    def register(check: Check) -> Check:
        RULES.append(Rule(code, name, finds, why, fix, check, stage))
        return check

    return register


def rules_by_code() -> dict[str, list[Rule]]:
    """The codes in order, each with its rules in registration order."""
    return {code: [r for r in RULES if r.code == code] for code in CODES}
