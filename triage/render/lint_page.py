"""A lint rule's page as Markdown: the one text `triage lint --explain` prints and the docs site shows.

The page has a fixed skeleton, like ruff's rule pages: what it finds, why it is a problem, an
example it fires on, the fix (with the example fixed), and the knowledge entry it belongs to.
`rule_lines` draws the same Markdown on a terminal.
"""

from __future__ import annotations

from triage.core.lint.model import Rule
from triage.core.model import KnowledgeBase
from triage.render.document import NO_LINKS, Links, entry_heading, md_link
from triage.render.safe_markdown import safe_markdown
from triage.render.terminal import Style, render_blocks

RULES_PAGE = "lint"
RULES_TITLE = "Lint rules"
SECTIONS = ("What it finds", "Why it is a problem", "Example", "Fix", "Entry")
SEVERITY_WORDS = {
    "error": "error: the run certainly hangs or silently trains wrong",
    "warning": "warning: likely wrong",
    "info": "info: worth knowing",
}


def rule_title(rule: Rule) -> str:
    """A lint rule's heading: its code and name."""
    return f"{rule.code}: {rule.name}"


def _code(text: str) -> str:
    fence = "````" if "```" in text else "```"
    return f"{fence}python\n{text.rstrip()}\n{fence}"


def rule_markdown(rule: Rule, kb: KnowledgeBase | None = None, links: Links = NO_LINKS) -> str:
    """The whole page of a rule, as Markdown."""
    entry = kb.entries.get(rule.entry) if kb is not None else None
    entry_ref = md_link(entry_heading(entry), links.entry(entry.id)) if entry is not None else rule.entry
    lines = [
        f"# {rule_title(rule)}",
        "",
        f"**{SEVERITY_WORDS[rule.severity]}** · entry {entry_ref}",
        "",
        safe_markdown(rule.message[0].upper() + rule.message[1:] + "."),
        "",
        f"## {SECTIONS[0]}",
        "",
        safe_markdown(rule.finds),
        "",
        f"## {SECTIONS[1]}",
        "",
        safe_markdown(rule.why),
        "",
        f"## {SECTIONS[2]}",
        "",
        _code(rule.example),
        "",
        f"## {SECTIONS[3]}",
        "",
        safe_markdown(rule.fix[0].upper() + rule.fix[1:] + ":"),
        "",
        _code(rule.fixed),
        "",
        f"## {SECTIONS[4]}",
        "",
        f"{entry_ref}: the full diagnosis and fix (`triage show {rule.entry}`). Silence one line with"
        f' `# triage: ignore[{rule.code}]`, or the whole project with `ignore = ["{rule.code}"]` under'
        " `[tool.triage.lint]` in pyproject.toml.",
    ]
    if rule.fact:
        lines += [
            "",
            f"When the walk is given the script (`triage --script train.py`), a finding sets the probe fact"
            f" `{rule.fact}`.",
        ]
    return "\n".join(lines) + "\n"


def rule_lines(rule: Rule, kb: KnowledgeBase | None, style: Style) -> list[str]:
    """The rule's page drawn for a terminal (the same Markdown, parsed once here)."""
    from triage.kb.markdown_ast import parse

    return render_blocks(parse(rule_markdown(rule, kb)), style)
