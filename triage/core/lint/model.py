"""What a lint rule is and what it reports: the Rule (its code, entry, severity and page text) and
the Finding (one place in one file). Kept apart from the checks so the CLI, the probe and the docs
site can list rules without running any analysis."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Severity = Literal["error", "warning", "info"]
# error: the run certainly hangs or silently trains wrong; warning: likely wrong; info: worth knowing.
SEVERITIES: tuple[Severity, ...] = ("error", "warning", "info")


@dataclass(frozen=True)
class Rule:
    """One check. The text fields are Markdown and make up the rule's page (`--explain`, the site)."""

    code: str  # TRG021
    entry: str  # the knowledge entry it belongs to: D21
    severity: Severity
    name: str  # rank-conditional-collective
    message: str  # one line: what is wrong, in general
    fix: str  # one line: what to do instead
    finds: str  # what it finds
    why: str  # why it is a problem
    example: str  # a script it fires on
    fixed: str  # the same script, fixed
    fact: str | None = None  # the probe fact (facts.yaml) a finding of this rule sets to true


@dataclass(frozen=True)
class Finding:
    """A rule firing at one place: `path:line:col: CODE [entry] message`."""

    code: str
    entry: str
    severity: Severity
    path: str
    line: int
    col: int  # 1-based, like ruff
    message: str

    def text(self) -> str:
        return f"{self.path}:{self.line}:{self.col}: {self.code} [{self.entry}] {self.message}"


@dataclass(frozen=True)
class Selection:
    """Which codes run: `select` (None: all) minus `ignore`. Codes may be prefixes (`TRG02`)."""

    select: tuple[str, ...] | None = None
    ignore: tuple[str, ...] = ()

    def wants(self, code: str) -> bool:
        if self.select is not None and not any(code.startswith(p) for p in self.select):
            return False
        return not any(code.startswith(p) for p in self.ignore)
