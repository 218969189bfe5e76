"""The lint rules on the docs site: one page per rule (`TRG021.html`) and an index (`lint.html`).

Each rule page is `triage.render.lint_page.rule_markdown`, the same text `triage lint --explain`
prints, rendered with the site's one Markdown parser.
"""

from __future__ import annotations

from triage.core.lint import RULES
from triage.core.lint.model import Rule
from triage.core.model import KnowledgeBase
from triage.render.document import HTML_LINKS, MARKDOWN_LINKS, Links, md_inline, md_link
from triage.render.lint_page import RULES_PAGE, RULES_TITLE, rule_markdown, rule_title
from triage.site.markdown_html import MarkdownHtml
from triage.site.pages import LAYOUT_IDS, layout

_INTRO = (
    "`triage lint train.py` reads a training script without running it and reports the bugs that hang"
    " or silently corrupt a distributed run, each under a code, the knowledge entry it belongs to and a"
    " severity: **error** (the run certainly hangs or trains wrong), **warning** (likely wrong),"
    " **info** (worth knowing). Silence a line with `# triage: ignore[TRG021]`; choose codes with"
    " `select` / `ignore` under `[tool.triage.lint]` in pyproject.toml."
)


def rules_markdown(kb: KnowledgeBase, links: Links) -> str:
    """The index of every rule as Markdown: a table of code, entry, severity and message."""
    rows = ["| code | entry | severity | finds |", "|---|---|---|---|"]
    for rule in RULES.values():
        code = md_link(f"`{rule.code}`", links.page(rule.code))
        entry = md_link(rule.entry, links.entry(rule.entry)) if rule.entry in kb.entries else rule.entry
        rows.append(f"| {code} | {entry} | {rule.severity} | {md_inline(rule.message)} |")
    return "\n".join([f"# {RULES_TITLE}", "", _INTRO, "", *rows]) + "\n"


def rule_page(rule: Rule, kb: KnowledgeBase, mdh: MarkdownHtml) -> str:
    """The HTML page of one lint rule."""
    body = mdh.block(rule_markdown(rule, kb, HTML_LINKS), ids=set(LAYOUT_IDS))
    main = f'<article class="entry-page rule-page">\n{body}\n<p><a href="{RULES_PAGE}.html">All lint rules</a></p></article>'
    return layout(f"{rule_title(rule)} · triage", main, current=RULES_PAGE, description=rule.message)


def rules_page(kb: KnowledgeBase, mdh: MarkdownHtml) -> str:
    """The HTML page listing every lint rule."""
    main = f'<article class="entry-page">\n{mdh.block(rules_markdown(kb, HTML_LINKS), ids=set(LAYOUT_IDS))}\n</article>'
    return layout(f"{RULES_TITLE} · triage", main, current=RULES_PAGE, description=RULES_TITLE)


def html_files(kb: KnowledgeBase, mdh: MarkdownHtml) -> dict[str, str]:
    """The lint rules' HTML pages by file name."""
    files = {f"{RULES_PAGE}.html": rules_page(kb, mdh)}
    for rule in RULES.values():
        files[f"{rule.code}.html"] = rule_page(rule, kb, mdh)
    return files


def markdown_files(kb: KnowledgeBase) -> dict[str, str]:
    """The lint rules' Markdown pages by file name."""
    files = {f"{RULES_PAGE}.md": rules_markdown(kb, MARKDOWN_LINKS)}
    for rule in RULES.values():
        files[f"{rule.code}.md"] = rule_markdown(rule, kb, MARKDOWN_LINKS)
    return files
