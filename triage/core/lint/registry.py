"""Every lint rule, by code, and the families of checks that produce their findings.

A family is a module with `RULES` (its Rule objects) and `check(ctx)` (its findings). Adding a
family means adding it to FAMILIES; codes must be unique, which `tests/core/lint` asserts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from types import ModuleType

from triage.core.lint import (
    rules_accumulation,
    rules_checkpointing,
    rules_collectives,
    rules_data,
    rules_ddp,
    rules_deepspeed,
    rules_device,
    rules_fsdp,
    rules_launch,
    rules_placement,
    rules_sharding,
    rules_side_effects,
    rules_unwrapped,
)
from triage.core.lint.context import Context
from triage.core.lint.model import Finding, Rule

Check = Callable[[Context], Iterable[Finding]]
FAMILIES: tuple[ModuleType, ...] = (
    rules_device,
    rules_placement,
    rules_ddp,
    rules_checkpointing,
    rules_data,
    rules_sharding,
    rules_fsdp,
    rules_deepspeed,
    rules_collectives,
    rules_side_effects,
    rules_launch,
    rules_accumulation,
    rules_unwrapped,
)


def _rules() -> dict[str, Rule]:
    rules: dict[str, Rule] = {}
    for family in FAMILIES:
        for rule in family.RULES:
            rules[rule.code] = rule
    return dict(sorted(rules.items()))


RULES: dict[str, Rule] = _rules()
CHECKS: tuple[Check, ...] = tuple(family.check for family in FAMILIES)


def rule(code: str) -> Rule | None:
    """The rule for a code, forgiving case and missing zero padding (`trg21`, `TRG021`, `21`)."""
    text = code.strip().upper()
    digits = text[3:] if text.startswith("TRG") else text
    if not digits.isdigit():
        return None
    return RULES.get(f"TRG{int(digits):03d}")
