"""An entry, and the decision graph, as Markdown: the one source every rendering starts from.

The docs site renders this Markdown to HTML (with `triage.kb.markdown_ast.make_parser`), the
Markdown export writes it as it is for MkDocs or Sphinx (MyST), and the terminal renderer can
draw the same sections. Pure string work: knowledge in, Markdown out; no markdown-it import, so
the fast `ask` path can use it.

The Markdown is safe in any renderer: text that is meant literally (symptoms, regexes) is
escaped, and in the Markdown-bearing fields every `<` that could open an HTML tag outside code is
written as `&lt;`, because MkDocs and MyST pass raw HTML through where markdown-it (with HTML
disabled) would not.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Collection
from dataclasses import dataclass

from triage.core.graph import breadth_first, exits, incoming
from triage.core.model import Entry, KnowledgeBase, Node, ProbeNode, QuestionNode
from triage.render.parts import entry_parts
from triage.render.safe_markdown import code_spans, safe_markdown
from triage.render.verify import VERIFY_BADGE, verify_headline

OUT_OF_SCOPE_LABEL = "not covered by triage"
GRAPH_TITLE = "Decision graph"


@dataclass(frozen=True)
class Links:
    """How pages refer to each other: `suffix` ".html" or ".md", or None for no links (terminal)."""

    suffix: str | None = None
    graph_page: str = "graph"
    index_page: str = "index"

    def entry(self, entry_id: str, anchor: str = "") -> str | None:
        if self.suffix is None:
            return None
        return f"{entry_id}{self.suffix}" + (f"#{anchor}" if anchor else "")

    def node(self, node_id: str, *, same_page: bool = False) -> str | None:
        if self.suffix is None:
            return None
        return f"#{node_id}" if same_page else f"{self.graph_page}{self.suffix}#{node_id}"

    def page(self, name: str) -> str | None:
        return None if self.suffix is None else f"{name}{self.suffix}"


NO_LINKS = Links()
HTML_LINKS = Links(".html")
MARKDOWN_LINKS = Links(".md")


@dataclass(frozen=True)
class DocSection:
    """One titled part of a page; `anchor` is the slug of `title` (MkDocs and MyST agree on it)."""

    anchor: str
    title: str
    body: str  # Markdown, without the heading


# -- escaping ---------------------------------------------------------------------------------

_SLUG_DROP = re.compile(r"[^\w\s-]")
_SLUG_JOIN = re.compile(r"[-\s]+")


def slugify(text: str) -> str:
    """The heading id MkDocs (Python-Markdown's toc) gives `text`; MyST's GitHub-style slug agrees
    for the headings written here (letters, digits, spaces, `-` and `_`)."""
    value = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    value = _SLUG_DROP.sub("", value).strip().lower()
    return _SLUG_JOIN.sub("-", value)


# An underscore between two letters or digits (drop_last) can never start emphasis; others can.
_LITERAL_SPECIAL = re.compile(r"([\\`*\[\]]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9]))")
_LINE_START = re.compile(r"^([#>+-]|\d+(?=[.)]))")


def md_text(text: str, *, table: bool = False) -> str:
    """Plain text (a symptom, a fact value) as Markdown that shows exactly that text."""
    value = " ".join(text.split()).replace("&", "&amp;").replace("<", "&lt;")
    value = _LITERAL_SPECIAL.sub(r"\\\1", value)
    value = _LINE_START.sub(
        lambda m: m.group(0) + "\\" if m.group(0)[0].isdigit() else "\\" + m.group(0), value
    )
    return value.replace("|", "\\|") if table else value


def md_code(text: str) -> str:
    """An inline code span holding `text` verbatim, whatever backticks it contains."""
    value = " ".join(text.split("\n"))
    longest = max((len(run) for run in re.findall(r"`+", value)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if value.startswith("`") or value.endswith("`") or not value.strip() else ""
    return f"{fence}{pad}{value}{pad}{fence}"


def md_inline(text: str) -> str:
    """A one-line Markdown field (title, summary, prompt) made safe and kept on one line."""
    return safe_markdown(" ".join(text.split()))


def md_link(label_markdown: str, href: str | None) -> str:
    """A Markdown link, or just the label when there is no target."""
    if href is None:
        return label_markdown
    return f"[{label_markdown}]({href})"


def link_text(text: str) -> str:
    """Inline Markdown usable as link text: brackets outside code would end the link early."""
    value = md_inline(text)
    parts: list[str] = []
    pos = 0
    for start, end in [*code_spans(value), (len(value), len(value))]:
        parts.append(value[pos:start].replace("[", "\\[").replace("]", "\\]"))
        parts.append(value[start:end])
        pos = end
    return "".join(parts)


# -- entries ----------------------------------------------------------------------------------


def verify_sentence(entry: Entry) -> str:
    """One line saying whether the fix changes the science of the run, as Markdown."""
    return f"**{md_inline(verify_headline(entry))}** {md_inline(entry.verify.why)}".rstrip()


def entry_heading(entry: Entry) -> str:
    """`D9: title` as inline Markdown."""
    return f"{entry.id}: {md_inline(entry.title)}"


def entry_sections(
    entry: Entry, kb: KnowledgeBase, links: Links = NO_LINKS, only: Collection[str] | None = None
) -> tuple[DocSection, ...]:
    """The sections of an entry's page as Markdown, in the one order of triage.render.parts;
    `only` keeps the parts with those keys."""
    bodies: dict[str, Callable[[], str]] = {
        "fix": lambda: safe_markdown(entry.fix.strip()),
        "verification": lambda: verify_sentence(entry),
        "root_cause": lambda: safe_markdown(entry.root_cause.strip()),
        "symptoms": lambda: "\n".join(f"- {md_text(s)}" for s in entry.symptoms),
        "signatures": lambda: _signatures(entry),
        "confirm": lambda: _confirm(entry, kb),
        "graph": lambda: _graph_paths(entry.id, kb, links),
        "related": lambda: "\n".join(
            f"- {md_link(entry_heading(kb.entries[r]), links.entry(r))}"
            for r in entry.related
            if r in kb.entries
        ),
        "references": lambda: "\n".join(f"- [{link_text(r.title)}]({_url(r.url)})" for r in entry.references),
    }
    return tuple(_section(part.title, bodies[part.key]()) for part in entry_parts(entry, kb, only))


def entry_markdown(entry: Entry, kb: KnowledgeBase, links: Links = NO_LINKS) -> str:
    """The whole page of an entry: its heading, summary, badges, then every section."""
    section = kb.section_title(entry.section)
    index = links.page(links.index_page)
    section_link = md_link(md_inline(section), f"{index}#{slugify(section)}" if index else None)
    tags = [section_link, entry.kind]
    if not entry.covered:
        tags.append(f"**{OUT_OF_SCOPE_LABEL}**")
    if entry.verify.needed:
        badge = f"**{VERIFY_BADGE}**"
        tags.append(md_link(badge, "#verification" if links.suffix else None))
    lines = [f"# {entry_heading(entry)}", "", " · ".join(tags), "", md_inline(entry.summary), ""]
    for part in entry_sections(entry, kb, links):
        lines += [f"## {part.title}", "", part.body, ""]
    return "\n".join(lines).rstrip() + "\n"


def _section(title: str, body: str) -> DocSection:
    return DocSection(slugify(title), title, body)


def _url(url: str) -> str:
    return url.replace(" ", "%20").replace("(", "%28").replace(")", "%29").replace("<", "%3C")


def _signatures(entry: Entry) -> str:
    if not entry.signatures:
        return "This problem prints no error line of its own; recognise it by its symptoms."
    lines = []
    for sig in entry.signatures:
        extra = [f"weight {sig.weight:g}"] if sig.weight < 1.0 else []
        if sig.echo:
            extra.append("usually an echo of another rank's failure")
        tail = f" — {md_inline(sig.note)}" if sig.note else ""
        if extra:
            tail += f" ({'; '.join(extra)})"
        lines.append(f"- {md_code(sig.pattern)}{tail}")
    intro = "Log lines matching these regular expressions (case-insensitive, one line at a time) point here:"
    return intro + "\n\n" + "\n".join(lines)


def _confirm(entry: Entry, kb: KnowledgeBase) -> str:
    lines = []
    for item in entry.confirm:
        fact = kb.facts.get(item.fact)
        probe = f" (probe `{fact.probe}`)" if fact else ""
        values = " or ".join(md_code(v) for v in item.values)
        note = f": {md_inline(item.note)}" if item.note else ""
        lines.append(f"- {md_code(item.fact)} is {values}{probe}{note}")
    return "\n".join(lines)


def _graph_paths(entry_id: str, kb: KnowledgeBase, links: Links) -> str:
    lines = []
    for node, ways in incoming(kb.graph).get(entry_id, []):
        answers = [_answer(node, e.way, e.label) for e in ways]
        where = md_link(md_inline(node.prompt), links.node(node.id))
        lines.append(f"- {where} → {' or '.join(answers)}")
    return "\n".join(lines)


def _answer(node: Node, way: str, label: str) -> str:
    """How the reader gets from `node` along one exit, as inline Markdown."""
    if way == "option":
        return f"*{md_inline(label)}*"
    if way == "unknown":
        return "*I don't know*"
    fact = md_code(node.fact) if isinstance(node, ProbeNode) else ""
    if way == "value":
        return f"{fact} = {md_code(label)}"
    if way == "default":
        return f"{fact} has another value"
    return "the probe cannot run here"


# -- the decision graph -----------------------------------------------------------------------


def graph_sections(kb: KnowledgeBase, links: Links = NO_LINKS) -> tuple[DocSection, ...]:
    """One section per graph node, start first then breadth-first; the anchor is the node id and
    the title its prompt. Option links point at the next node on the same page or the entry."""
    sections = []
    for node_id in graph_order(kb):
        node = kb.graph.nodes[node_id]
        sections.append(DocSection(node.id, node.prompt, _node_body(node, kb, links)))
    return tuple(sections)


def graph_order(kb: KnowledgeBase) -> list[str]:
    """Node ids breadth-first from the start, then any the walk did not reach, in file order."""
    return breadth_first(kb.graph)


def graph_markdown(kb: KnowledgeBase, links: Links = NO_LINKS, *, diagram: str | None = None) -> str:
    """The decision graph as one page. Headings are the node ids, so their slugs are the anchors."""
    lines = [f"# {GRAPH_TITLE}", "", _graph_intro(kb, links), ""]
    if diagram:
        lines += [f"![The decision graph as a diagram]({diagram})", ""]
    for part in graph_sections(kb, links):
        lines += [f"## {part.anchor}", "", f"**{md_inline(part.title)}**", "", part.body, ""]
    return "\n".join(lines).rstrip() + "\n"


def _graph_intro(kb: KnowledgeBase, links: Links) -> str:
    start = md_link("the first question", links.node(kb.graph.start, same_page=True))
    return (
        f"Start at {start} and follow the answer that fits. Question nodes ask you; probe nodes are "
        "answered from a fact a probe reads on the machine, and fall back to a question when the "
        "probe cannot run. Every path ends at an entry."
    )


def _target(target: str, kb: KnowledgeBase, links: Links) -> str:
    entry = kb.entries.get(target)
    if entry is not None:
        return md_link(f"**{entry.id}**: {link_text(entry.title)}", links.entry(entry.id))
    node = kb.graph.nodes.get(target)
    if node is not None:
        return md_link(link_text(node.prompt), links.node(node.id, same_page=True))
    return md_text(target)


def _node_body(node: Node, kb: KnowledgeBase, links: Links) -> str:
    if isinstance(node, QuestionNode):
        lines = [md_inline(node.help), ""] if node.help else []
        for number, exit_ in enumerate(exits(node), 1):
            target = _target(exit_.target, kb, links)
            if exit_.way == "option":
                lines.append(f"{number}. {md_inline(exit_.label)} → {target}")
            else:
                lines += ["", f"*I don't know* → {target}"]
        return "\n".join(lines)
    fact = kb.facts.get(node.fact)
    about = f" ({fact.type}): {md_inline(fact.description)}" if fact else ""
    lines = [
        f"*Probe.* Branches on the fact {md_code(node.fact)}{about}",
        "",
        "| value | leads to |",
        "|---|---|",
    ]
    when = {"default": "any other value", "fallback": "probe unavailable"}
    for exit_ in exits(node):
        value = md_code(exit_.label) if exit_.way == "value" else when[exit_.way]
        lines.append(f"| {value} | {_cell(_target(exit_.target, kb, links))} |")
    return "\n".join(lines)


def _cell(markdown: str) -> str:
    return markdown.replace("|", "\\|")
