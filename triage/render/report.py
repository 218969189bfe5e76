"""The session report: everything a triage session found, as one Markdown file a person can share.

Pure: it takes the knowledge base, the entry reached, the trail and the probe results, and returns
text. Secrets in probe evidence (tokens in environment dumps, passwords in URLs) and in anything
the user typed are redacted with triage.core.redact before they reach the page, because reports get
pasted into issues and chat.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from triage import __version__
from triage.core.facts import ProbeResult
from triage.core.model import Confirm, Entry, KnowledgeBase, ProbeNode
from triage.core.walker import Step, fact_text

REPORT_SECTIONS = ("Fix", "Verification", "Root cause", "Related", "References")
SHELL_LANGUAGES = frozenset({"", "bash", "sh", "shell", "console", "zsh", "sh-session"})
_ALIGNED_COMMENT = re.compile(r"\s{2,}#.*$")


@dataclass(frozen=True)
class Confirmation:
    """A fact the entry names as confirming it, and what this session found for it."""

    confirm: Confirm
    value: str
    agrees: bool


def confirmations(entry: Entry, facts: Mapping[str, object]) -> list[Confirmation]:
    """The entry's confirming facts that the session's probes established, and whether they agree."""
    out = []
    for confirm in entry.confirm:
        if confirm.fact in facts:
            value = fact_text(facts[confirm.fact])
            out.append(Confirmation(confirm, value, value in {v.lower() for v in confirm.values}))
    return out


def verify_headline(entry: Entry) -> str:
    """One line saying whether the fix changes the experiment, naming what it changes."""
    if entry.verify.needed:
        from triage.render.document import CHANGE_WORDS

        changes = ", ".join(CHANGE_WORDS.get(c, c.replace("_", " ")) for c in entry.verify.changes)
        return f"RE-CHECK YOUR EXPERIMENT: this fix changes {changes}."
    return "No experiment re-check needed: this fix does not change what the run computes."


def first_command(kb: KnowledgeBase, entry: Entry) -> str | None:
    """The first code block of the fix (the command or snippet to try first), else its first inline
    code span; read from the parsed Markdown the knowledge base carries."""
    blocks = kb.docs.get(entry.id, {}).get("fix")
    if blocks is None:
        from triage.kb import markdown_ast

        blocks = markdown_ast.parse(entry.fix)
    code = _first(blocks, "code")
    if code is not None:
        text = str(code["text"])
        if str(code.get("lang", "")).lower() in SHELL_LANGUAGES:
            command = first_shell_command(text)
            if command:
                return command
        return text.strip() or None
    span = _first_span(blocks)
    return span.strip() if span else None


def first_shell_command(text: str) -> str | None:
    """The first command of a shell snippet: comments and prompts dropped, continuations joined,
    an aligned trailing comment (two or more spaces, then #) removed."""
    parts: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not parts and (not line or line.startswith("#")):
            continue
        if line.startswith("$ "):
            line = line[2:]
        line = _ALIGNED_COMMENT.sub("", line)
        if line.endswith("\\"):
            parts.append(line[:-1].rstrip())
            continue
        parts.append(line)
        break
    return " ".join(p for p in parts if p) or None


def _first(blocks: Sequence[Any], kind: str) -> dict[str, Any] | None:
    for block in blocks:
        if block.get("t") == kind:
            return dict(block)
        children: list[Any] = []
        if block.get("t") in ("ul", "ol"):
            for item in block["items"]:
                children.extend(item)
        elif block.get("t") == "quote":
            children = list(block["c"])
        found = _first(children, kind)
        if found is not None:
            return found
    return None


def _first_span(blocks: Sequence[Any]) -> str | None:
    def spans(items: Sequence[Any]) -> str | None:
        for span in items:
            if span[0] == "code":
                return str(span[1])
            if span[0] in ("strong", "em"):
                found = spans(span[1])
            elif span[0] == "link":
                found = spans(span[2])
            else:
                found = None
            if found:
                return found
        return None

    for block in blocks:
        if block.get("t") in ("p", "h"):
            found = spans(block["c"])
            if found:
                return found
        elif block.get("t") in ("ul", "ol"):
            for item in block["items"]:
                found = _first_span(item)
                if found:
                    return found
        elif block.get("t") == "quote":
            found = _first_span(block["c"])
            if found:
                return found
    return None


def report_filename(entry_id: str, when: datetime) -> str:
    return f"triage-report-{entry_id}-{when:%Y%m%d-%H%M%S}.md"


def build_report(
    kb: KnowledgeBase,
    entry: Entry,
    *,
    trail: Sequence[Step],
    results: Sequence[ProbeResult],
    facts: Mapping[str, object],
    own_words: Mapping[str, str] | None = None,
    cancelled: Sequence[str] = (),
    how: str = "",
    when: datetime | None = None,
) -> str:
    """The Markdown report of a session that reached `entry`.

    `trail` is the walk that led there (empty when the entry was opened from search), `results`
    every probe result of the session, `own_words` what the user typed at each question (by node
    id), `cancelled` the probes the user stopped, `how` a line on how the entry was reached.
    """
    from triage.core.redact import redact_text

    own_words = own_words or {}
    when = when or datetime.now().astimezone()
    out: list[str] = [
        f"# triage report: {entry.id} {entry.title}",
        "",
        f"Generated {when:%Y-%m-%d %H:%M %Z}".rstrip() + f" by triage {__version__}.",
        "",
        f"> **{verify_headline(entry)}**",
        ">",
        f"> {entry.verify.why.strip()}",
        "",
        "## How triage got here",
        "",
    ]
    if how:
        out += [redact_text(how), ""]
    if not trail:
        out += ["No questions were answered: the entry was opened directly.", ""]
    for number, step in enumerate(trail, 1):
        node = kb.graph.nodes.get(step.node)
        target = kb.entries[step.target].id if step.target in kb.entries else step.target
        if isinstance(node, ProbeNode):
            probe = kb.facts[node.fact].probe if node.fact in kb.facts else node.fact
            if step.via == "override":
                line = f"{step.prompt}: overridden by you to `{step.answer}` → {target}"
            elif step.via == "fallback":
                line = f"{step.prompt}: the {probe} probe did not settle `{node.fact}`, so you were asked"
            else:
                line = f"{step.prompt}: probe {probe} found `{node.fact} = {step.answer}` → {target}"
        else:
            line = f"**{step.prompt}** {step.answer}"
            words = own_words.get(step.node)
            if words:
                line += f" (in your words: “{redact_text(words)}”)"
        out.append(f"{number}. {line}")
    if trail:
        out.append("")
    out += ["## Probe evidence", ""]
    if cancelled:
        out += [f"Cancelled by you: {', '.join(cancelled)}.", ""]
    if not results:
        out += ["No probe ran in this session.", ""]
    for result in results:
        out += [f"### {result.name}: {result.status} ({result.duration_s:.1f} s)", ""]
        if result.summary:
            out += [redact_text(result.summary), ""]
        if result.facts:
            out += [
                f"- `{name}` = `{redact_text(fact_text(value))}`"
                for name, value in sorted(result.facts.items())
            ]
            out.append("")
        for item in result.evidence:
            body = redact_text(item.output).rstrip() or "(no output)"
            out += [f"`{redact_text(item.source)}`", "", "```text", body.replace("```", "'''"), "```", ""]
    agreeing = confirmations(entry, facts)
    if agreeing:
        out += ["### What the probes say about this diagnosis", ""]
        for c in agreeing:
            word = "supports it" if c.agrees else "does not fit it"
            note = f": {c.confirm.note}" if c.confirm.note else ""
            out.append(f"- `{c.confirm.fact} = {c.value}` {word}{note}")
        out.append("")
    # The entry itself, as the same Markdown sections the docs site and the CLI render.
    from triage.render.document import entry_heading, entry_sections, md_inline

    out += [f"## {entry_heading(entry)}", "", md_inline(entry.summary), ""]
    sections = {part.title: part for part in entry_sections(entry, kb)}
    for title in REPORT_SECTIONS:
        part = sections.get(title)
        if part is not None:
            out += [f"### {part.title}", "", part.body, ""]
    return "\n".join(out).rstrip() + "\n"
