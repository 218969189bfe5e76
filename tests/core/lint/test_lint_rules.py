"""Every rule against its fixtures and its own page: the failing script fires exactly that code, the
passing one fires nothing, and the page's example and fix behave the same way."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from triage.core.lint import RULES, Rule, lint_source, rule
from triage.core.lint.model import SEVERITIES
from triage.core.model import KnowledgeBase

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def codes(source: str, path: str = "train.py") -> list[str]:
    return [f.code for f in lint_source(source, path)]


@pytest.mark.parametrize("code", sorted(RULES))
def test_the_failing_fixture_fires_exactly_its_code(code: str) -> None:
    path = FIXTURES / f"{code}_fail.py"
    found = codes(path.read_text(encoding="utf-8"), path.name)
    assert found, f"{path.name}: nothing fired"
    assert set(found) == {code}, f"{path.name}: {found}"


@pytest.mark.parametrize("code", sorted(RULES))
def test_the_passing_fixture_fires_nothing(code: str) -> None:
    path = FIXTURES / f"{code}_pass.py"
    assert codes(path.read_text(encoding="utf-8"), path.name) == []


@pytest.mark.parametrize("code", sorted(RULES))
def test_the_page_example_fires_and_its_fix_does_not(code: str) -> None:
    page = RULES[code]
    assert code in codes(page.example), "the page's example must show the bug"
    assert code not in codes(page.fixed), "the page's fixed script must not fire"


def test_every_fixture_belongs_to_a_rule() -> None:
    names = {p.name for p in FIXTURES.iterdir() if p.suffix == ".py"}
    expected = {f"{code}_{kind}.py" for code in RULES for kind in ("fail", "pass")}
    assert names == expected


@pytest.mark.parametrize("code", sorted(RULES))
def test_a_rule_is_complete(code: str, kb: KnowledgeBase) -> None:
    page: Rule = RULES[code]
    assert re.fullmatch(r"TRG0\d\d", page.code) and page.code == code
    assert page.severity in SEVERITIES
    assert page.entry in kb.entries, f"{code} points at {page.entry}, which the knowledge base lacks"
    for text in (page.name, page.message, page.fix, page.finds, page.why, page.example, page.fixed):
        assert text.strip()
    assert "\n" not in page.message and "\n" not in page.fix
    if page.fact is not None:
        assert page.fact in kb.facts and kb.facts[page.fact].probe == "lint"


def test_codes_are_forgiving() -> None:
    assert rule("trg21") is RULES["TRG021"] is rule("21") is rule(" TRG021 ")
    assert rule("TRG999") is None and rule("D21") is None


def test_a_plain_script_gets_no_findings() -> None:
    """No distributed code at all: none of these bugs can happen, whatever else it does."""
    plain = (
        "import os, torch\n"
        "rank = 0\n"
        "torch.cuda.set_device(rank)\n"
        "model = torch.nn.Linear(2, 2).cuda()\n"
        "for step in range(10):\n"
        "    print(step)\n"
        "    torch.save(model.state_dict(), 'm.pt')\n"
        "os.makedirs('out')\n"
    )
    assert codes(plain) == []
