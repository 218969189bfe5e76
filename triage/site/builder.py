"""`triage docs build`: the knowledge base written out as a static HTML site or as Markdown pages.

HTML: index.html, one <ID>.html per entry, graph.html with the SVG drawn in, the stylesheet, the
search script and its index. Nothing is fetched from the network; every link is relative, so the
directory works from file:// and from any static host.

Markdown: the same pages as .md with relative links, graph.svg, and navigation snippets for
MkDocs (`nav:`) and Sphinx with MyST (a toctree), to drop into an existing documentation site.

The output directory is emptied only when a previous build wrote it (a manifest records what
it wrote); anything else already there makes the build refuse rather than delete.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from triage.core.errors import UserError, shown
from triage.core.lint import RULES
from triage.core.model import KnowledgeBase
from triage.render.document import (
    GRAPH_TITLE,
    MARKDOWN_LINKS,
    entry_heading,
    entry_markdown,
    graph_markdown,
    link_text,
    md_inline,
    md_link,
)
from triage.render.lint_page import RULES_PAGE, RULES_TITLE, rule_title
from triage.render.verify import VERIFY_BADGE, badge_meaning
from triage.site import lint_pages
from triage.site.diagram import layout, render_svg
from triage.site.markdown_html import MarkdownHtml
from triage.site.pages import entry_page, graph_page, index_page
from triage.site.search_index import search_script

FORMATS = ("html", "markdown")
MANIFEST = ".triage-docs.json"
MKDOCS_NAV = "mkdocs-nav.yml"
SPHINX_TOCTREE = "sphinx-toctree.txt"


@dataclass(frozen=True)
class BuildResult:
    """What a site build wrote."""

    out: Path
    format: str
    files: tuple[str, ...]  # written, relative to `out`


def build(kb: KnowledgeBase, out: Path, fmt: str = "html", *, nav_prefix: str | None = None) -> BuildResult:
    """Write the site for `kb` into `out` and return what was written.

    `nav_prefix` is where the Markdown pages will sit inside the host site's docs directory; it
    defaults to the name of `out` (`--out docs/triage` -> `triage/D9.md` in the snippets)."""
    if fmt not in FORMATS:
        raise UserError(f"unknown format {fmt!r}: use one of {', '.join(FORMATS)}")
    files = _html_files(kb) if fmt == "html" else _markdown_files(kb, out, nav_prefix)
    _prepare(out)
    try:
        for name, text in files.items():
            (out / name).write_text(text, encoding="utf-8", newline="\n")
        (out / MANIFEST).write_text(
            json.dumps({"format": fmt, "files": sorted(files)}, indent=1) + "\n", encoding="utf-8"
        )
    except OSError as exc:
        raise UserError(f"cannot write the site to {shown(str(out))}: {exc.strerror or exc}") from None
    return BuildResult(out, fmt, tuple(files))


def _asset(name: str) -> str:
    return resources.files("triage.site").joinpath("assets", name).read_text(encoding="utf-8")


def _light_palette(css: str) -> str:
    """The first `:root { ... }` block of the stylesheet: the light colours, for graph.svg."""
    match = re.search(r"^:root \{.*?^\}", css, re.S | re.M)
    return match.group(0) if match else ""


def _html_files(kb: KnowledgeBase) -> dict[str, str]:
    mdh = MarkdownHtml()
    css = _asset("style.css")
    diagram_css = _asset("diagram.css")
    inline_plan = layout(kb, lambda target, is_entry: f"{target}.html" if is_entry else f"#{target}")
    file_plan = layout(kb, lambda target, is_entry: f"{target}.html" if is_entry else f"graph.html#{target}")
    files = {
        "index.html": index_page(kb, mdh),
        "graph.html": graph_page(kb, mdh, render_svg(inline_plan)),
        "graph.svg": render_svg(file_plan, css=_light_palette(css) + "\n" + diagram_css),
        "style.css": css + "\n" + diagram_css,
        "search.js": _asset("search.js"),
        "search-index.js": search_script(kb),
    }
    for entry in kb.entries.values():
        files[f"{entry.id}.html"] = entry_page(entry, kb, mdh)
    files.update(lint_pages.html_files(kb, mdh))
    return files


def _markdown_files(kb: KnowledgeBase, out: Path, nav_prefix: str | None) -> dict[str, str]:
    css = _asset("style.css")
    plan = layout(kb)
    files = {
        "index.md": index_markdown(kb),
        "graph.md": graph_markdown(kb, MARKDOWN_LINKS, diagram="graph.svg"),
        "graph.svg": render_svg(plan, css=_light_palette(css) + "\n" + _asset("diagram.css")),
    }
    for entry in kb.entries.values():
        files[f"{entry.id}.md"] = entry_markdown(entry, kb, MARKDOWN_LINKS)
    files.update(lint_pages.markdown_files(kb))
    prefix = out.resolve().name if nav_prefix is None else nav_prefix.strip("/")
    files[MKDOCS_NAV] = mkdocs_nav(kb, prefix)
    files[SPHINX_TOCTREE] = sphinx_toctree(kb, prefix)
    return files


def index_markdown(kb: KnowledgeBase) -> str:
    """The index page as Markdown: every section with its entries, their summary and badge."""
    lines = [
        "# Distributed PyTorch triage",
        "",
        f"{len(kb.entries)} entries on distributed PyTorch jobs that will not launch, hang, or silently "
        f"mis-shard. Browse by section or follow the [{GRAPH_TITLE.lower()}](graph.md). Entries marked "
        f"*{VERIFY_BADGE}* have fixes that {badge_meaning()}.",
        "",
    ]
    for section in kb.sections:
        entries = [e for e in kb.entries.values() if e.section == section.id]
        if not entries:
            continue
        lines += [f"## {md_inline(section.title)}", ""]
        if section.blurb:
            lines += [md_inline(section.blurb), ""]
        for entry in entries:
            badge = f" *({VERIFY_BADGE})*" if entry.verify.needed else ""
            link = md_link(f"**{entry.id}**: {link_text(entry.title)}", MARKDOWN_LINKS.entry(entry.id))
            lines.append(f"- {link}{badge}  ")
            lines.append(f"  {md_inline(entry.summary)}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _join(prefix: str, name: str) -> str:
    return f"{prefix}/{name}" if prefix else name


def mkdocs_nav(kb: KnowledgeBase, prefix: str) -> str:
    """A `nav:` fragment for mkdocs.yml: paste its list under `nav:`."""
    q = json.dumps  # a JSON string is a valid YAML scalar, whatever the title holds
    lines = [
        "# Paste this list under `nav:` in mkdocs.yml. The pages are expected in",
        f"# <docs_dir>/{prefix or '.'}/ ; rebuild with --nav-prefix if you put them elsewhere.",
        f"- {q('Triage')}:",
        f"    - {q(_join(prefix, 'index.md'))}",
        f"    - {q(GRAPH_TITLE)}: {q(_join(prefix, 'graph.md'))}",
    ]
    for section in kb.sections:
        entries = [e for e in kb.entries.values() if e.section == section.id]
        if not entries:
            continue
        lines.append(f"    - {q(section.title)}:")
        for entry in entries:
            label = entry_heading(entry).replace("`", "")
            lines.append(f"        - {q(label)}: {q(_join(prefix, entry.id + '.md'))}")
    lines.append(f"    - {q(RULES_TITLE)}:")
    lines.append(f"        - {q(_join(prefix, RULES_PAGE + '.md'))}")
    for rule in RULES.values():
        lines.append(f"        - {q(rule_title(rule))}: {q(_join(prefix, rule.code + '.md'))}")
    return "\n".join(lines) + "\n"


def sphinx_toctree(kb: KnowledgeBase, prefix: str) -> str:
    """A MyST toctree directive for the host site's index page."""
    docs = [_join(prefix, "index"), _join(prefix, "graph")]
    docs += [_join(prefix, entry.id) for entry in kb.entries.values()]
    docs += [_join(prefix, RULES_PAGE), *(_join(prefix, code) for code in RULES)]
    body = "\n".join(docs)
    return (
        "```{toctree}\n:caption: Triage\n:maxdepth: 1\n\n"
        f"{body}\n```\n\n"
        "<!-- conf.py needs: extensions = ['myst_parser'] and myst_heading_anchors = 3 -->\n"
    )


def _prepare(out: Path) -> None:
    """Make `out` an empty directory, removing only what a previous build listed."""
    try:
        if out.exists() and not out.is_dir():
            raise UserError(f"--out {shown(str(out))} is a file, not a directory")
        out.mkdir(parents=True, exist_ok=True)
        present = set(os.listdir(out))
    except OSError as exc:
        raise UserError(f"cannot create {shown(str(out))}: {exc.strerror or exc}") from None
    if not present:
        return
    previous = _manifest_files(out / MANIFEST) if MANIFEST in present else None
    if previous is None:
        raise UserError(
            f"{out} is not empty and was not written by `triage docs build`; choose a new or empty directory"
        )
    strangers = present - set(previous) - {MANIFEST}
    if strangers:
        name = sorted(strangers)[0]
        raise UserError(
            f"{out} holds {name!r}, which an earlier build did not write; move it or choose another --out"
        )
    try:
        for name in previous:
            (out / name).unlink(missing_ok=True)
    except OSError as exc:
        raise UserError(f"cannot clear the previous build in {out}: {exc.strerror or exc}") from None


def _manifest_files(path: Path) -> list[str] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        return None
    # Names only: a tampered manifest must not reach outside the directory.
    return [f for f in files if f and "/" not in f and "\\" not in f and f not in (".", "..")]
