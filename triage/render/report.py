"""The report: one Markdown document to paste into an issue, for `triage report` and the TUI's `e`.

One builder for both, so the two always have the same sections in the same order (REPORT_SECTIONS).
Pure: it takes what was gathered (probe results, the machine's inventory, logs diagnosed, the walk
that reached an entry, and the parts other commands contribute: a hung job, lint findings) and
returns text. The finished document goes through triage.core.redact as a whole, because reports get
pasted into issues and chat: nothing gathered here reaches the page unredacted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from triage import __version__
from triage.core.facts import ProbeResult
from triage.core.findings import Finding
from triage.core.inventory import Inventory
from triage.core.logscan.scanner import Scan
from triage.core.logscan.verdict import Verdict
from triage.core.model import Confirm, Entry, KnowledgeBase, ProbeNode
from triage.core.walker import Step, fact_text
from triage.render.fix_command import first_command, first_shell_command
from triage.render.verify import verify_headline

__all__ = [
    "REPORT_PROBES",
    "REPORT_SECTIONS",
    "SCRIPT_SECTION",
    "ExtraPart",
    "LogPart",
    "ReportInput",
    "build_report",
    "first_command",
    "first_shell_command",
    "not_run_here",
    "report_filename",
    "verify_headline",
]

# The probes every report runs (quick ones); the dist mini-test only where asked for, the lint
# probe only with a script (its findings get a section of their own).
REPORT_PROBES = ("env", "gpu", "net", "versions", "configs")
SCRIPT_SECTION = "Training script"
# The entry's parts under "## Fix": the fix itself, then these (in the one order of render.parts).
FIX_PARTS = frozenset({"fix", "verification", "root_cause", "related", "references"})
REPORT_SECTIONS = (
    "Diagnosis",
    "Fix",
    "How triage got here",
    "Versions",
    "Launcher and rank contract",
    "NCCL and torch settings",
    "GPUs and topology",
    "Network",
    "Configs",
    "Probes",
    "Logs",
    "What triage could not look at",
)


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


def report_filename(label: str, when: datetime) -> str:
    """The file name a report is saved under."""
    return f"triage-report-{label}-{when:%Y%m%d-%H%M%S}.md"


@dataclass(frozen=True)
class LogPart:
    """Logs diagnosed together (`--log a.log --log b.log` is one job's output)."""

    scan: Scan
    verdict: Verdict


@dataclass(frozen=True)
class ExtraPart:
    """A section another command contributes: `triage hang`'s picture of a hung job, `triage lint`'s
    findings on the script. It is placed before the last section; `entries` are the diagnoses it
    proposes, best first (the report leads with the first when nothing stronger was found)."""

    title: str
    markdown: str
    entries: tuple[str, ...] = ()
    how: str = ""  # one line: how it reached its diagnosis


@dataclass(frozen=True)
class ReportInput:
    """Everything a report is built from. Empty parts are said to be missing, never left out."""

    when: datetime
    host: str
    command: str  # how the report was made: the command line, or "the interactive app (e)"
    results: Sequence[ProbeResult] = ()
    not_run: Mapping[str, str] = field(default_factory=dict)  # probe -> why it did not run
    inventory: Inventory | None = None
    inventory_why: str = "the machine's inventory was not read"
    findings: Sequence[Finding] = ()
    logs: Sequence[LogPart] = ()
    entry: Entry | None = None  # the diagnosis, when the caller reached one (the walk)
    how: str = ""  # how `entry` was reached, in one line
    trail: Sequence[Step] = ()
    own_words: Mapping[str, str] = field(default_factory=dict)
    cancelled: Sequence[str] = ()
    extras: Sequence[ExtraPart] = ()
    unseen: Sequence[str] = ()  # what else could not be looked at, each with why


def not_run_here(results: Sequence[ProbeResult], *, script: str | None) -> dict[str, str]:
    """The probes a report from the interactive app did not run, and why."""
    ran = {r.name for r in results}
    out = {}
    if "dist" not in ran:
        out["dist"] = "the mini-test runs only where the walk asks for it (or `triage report --dist`)"
    if "lint" not in ran and not script:
        out["lint"] = "no training script given (`triage --script train.py`)"
    return out


def diagnosis(kb: KnowledgeBase, data: ReportInput) -> tuple[Entry | None, str]:
    """The entry the report leads with, and where it came from: the walk's result, a log's first
    diagnosis, another command's (hang, lint), or the entry the probes' findings support most."""
    if data.entry is not None:
        return data.entry, data.how or "reached in the interactive app"
    for part in data.logs:
        if part.verdict.found:
            best = part.verdict.diagnoses[0]
            return kb.entries.get(best.entry_id), f"from the log: {best.reason}"
    for extra in data.extras:
        for entry_id in extra.entries:
            if entry_id in kb.entries:
                return kb.entries[entry_id], extra.how or f"from {extra.title.lower()}"
    if data.findings:
        finding = data.findings[0]
        return kb.entries.get(finding.entry_id), f"from the probes: {finding.text}"
    return None, ""


def build_report(kb: KnowledgeBase, data: ReportInput) -> str:
    """The report as Markdown, redacted."""
    from triage.core.redact import redact_text
    from triage.render import report_machine as machine
    from triage.render.document import md_inline

    entry, source = diagnosis(kb, data)
    facts: dict[str, object] = {}
    for result in data.results:
        facts.update(result.facts)
    title = f"{entry.id} {entry.title}" if entry else "no diagnosis"
    out = [
        f"# triage report: {md_inline(title)}",
        "",
        f"Generated {data.when:%Y-%m-%d %H:%M %Z}".rstrip()
        + f" on `{data.host}` by triage {__version__} ({data.command}). Secrets are redacted; "
        "read it once before posting.",
        "",
    ]
    out += _lead(kb, entry, source)
    sections = {
        "Diagnosis": _diagnosis_section(kb, entry, source, data, facts),
        "Fix": _fix_section(kb, entry),
        "How triage got here": _trail_section(kb, data),
        "Versions": machine.versions_section(data.results, data.inventory, data.not_run),
        "Launcher and rank contract": machine.launcher_section(data.results, data.inventory, data.not_run),
        "NCCL and torch settings": machine.settings_section(data.inventory, data.inventory_why),
        "GPUs and topology": machine.gpus_section(data.results, data.inventory, data.not_run),
        "Network": machine.network_section(data.results, data.inventory, data.not_run),
        "Configs": machine.configs_section(data.results, data.not_run),
        "Probes": machine.probes_section(data.results, data.not_run, data.cancelled),
        "Logs": _logs_section(kb, data.logs),
        "What triage could not look at": _unseen_section(data),
    }
    for name in REPORT_SECTIONS[:-1]:
        out += [f"## {name}", "", sections[name].strip(), ""]
    for extra in [*_probe_parts(data.results), *data.extras]:
        out += [f"## {extra.title}", "", extra.markdown.strip(), ""]
    out += [f"## {REPORT_SECTIONS[-1]}", "", sections[REPORT_SECTIONS[-1]].strip(), ""]
    return redact_text("\n".join(out).rstrip() + "\n")


def _probe_parts(results: Sequence[ProbeResult]) -> list[ExtraPart]:
    """Sections of their own for probes that speak about the user's code: the lint probe's
    findings on the training script (`--script`)."""
    from triage.render.report_machine import fenced

    parts = []
    for result in results:
        if result.name == "lint":
            found = "\n\n".join(fenced(e.output) for e in result.evidence)
            parts.append(ExtraPart(SCRIPT_SECTION, f"{result.summary}\n\n{found}".strip()))
    return parts


def _lead(kb: KnowledgeBase, entry: Entry | None, source: str) -> list[str]:
    """The first screen: the verdict, the verification banner, the first thing to try."""
    from triage.render.document import md_code, md_inline, md_text

    if entry is None:
        return [
            "**No diagnosis.** Nothing the probes saw points at a known problem, and no log given "
            "(`--log FILE`) shows a known failure. The sections below are the facts to attach.",
            "",
        ]
    out = [
        f"**Diagnosis: {entry.id}, {md_inline(entry.title)}** ({md_text(source)})",
        "",
        f"> **{verify_headline(entry)}**",
        ">",
        f"> {md_inline(entry.verify.why)}",
        "",
    ]
    command = first_command(kb, entry)
    if command:
        out += [f"**Try first:** {md_code(command.splitlines()[0])} (the whole fix is below)", ""]
    return out


def _diagnosis_section(
    kb: KnowledgeBase, entry: Entry | None, source: str, data: ReportInput, facts: Mapping[str, object]
) -> str:
    from triage.render.document import entry_heading, md_inline, md_text

    out: list[str] = []
    if entry is None:
        out.append("No diagnosis: nothing given to this report points at a known problem.")
    else:
        out += [
            f"**{entry_heading(entry)}**",
            "",
            md_inline(entry.summary),
            "",
            f"Reached {md_text(source)}.",
        ]
        agreeing = confirmations(entry, facts)
        if agreeing:
            out += ["", "What the probes say about it:", ""]
            for c in agreeing:
                word = "supports it" if c.agrees else "does not fit it"
                note = f": {md_inline(c.confirm.note)}" if c.confirm.note else ""
                out.append(f"- `{c.confirm.fact} = {c.value}` {word}{note}")
    others = [f for f in data.findings if entry is None or f.entry_id != entry.id]
    if others:
        out += ["", "Other entries the probes' findings point at:", ""]
        out += [f"- **{f.entry_id}** {md_inline(f.title)}: {md_text(f.text)}" for f in others]
    return "\n".join(out)


def _fix_section(kb: KnowledgeBase, entry: Entry | None) -> str:
    from triage.render.document import entry_sections

    if entry is None:
        return "No fix to give without a diagnosis. `triage` (the interactive app) or `triage ask` can help find one."
    # The fix first, then the entry's other parts a maintainer reads, in the one order of
    # triage.render.parts (the same order as `triage show`, the app and the site).
    parts = entry_sections(entry, kb, only=FIX_PARTS)
    out = [parts[0].body]
    for part in parts[1:]:
        out += ["", f"### {part.title}", "", part.body]
    return "\n".join(out)


def _trail_section(kb: KnowledgeBase, data: ReportInput) -> str:
    from triage.core.redact import redact_text
    from triage.render.document import md_inline

    if not data.trail:
        how = md_inline(data.how) + " " if data.how else ""
        return (
            how
            + "No questions were answered: "
            + (
                "this report was made from the command line."
                if not data.how
                else "the entry was opened directly."
            )
        )
    out: list[str] = [md_inline(data.how), ""] if data.how else []
    for number, step in enumerate(data.trail, 1):
        node = kb.graph.nodes.get(step.node)
        target = kb.entries[step.target].id if step.target in kb.entries else _node_words(kb, step.target)
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
            words = data.own_words.get(step.node)
            if words:
                line += f" (in your words: “{redact_text(words)}”)"
        out.append(f"{number}. {line}")
    return "\n".join(out)


def _node_words(kb: KnowledgeBase, target: str) -> str:
    """A graph node as its question's words, never its internal id."""
    node = kb.graph.nodes.get(target)
    return f"“{node.prompt}”" if node is not None else target


def _logs_section(kb: KnowledgeBase, logs: Sequence[LogPart]) -> str:
    from triage.render.document import md_code
    from triage.render.log_text import evidence, evidence_line, rank_rows, shown_score, summary_lines
    from triage.render.ranks import ranks_markdown
    from triage.render.report_machine import details, fenced

    if not logs:
        return "No log given (`triage report --log FILE` diagnoses one)."
    out: list[str] = []
    for part in logs:
        scan, verdict = part.scan, part.verdict
        out += [
            ", ".join(md_code(s) for s in scan.sources) + ":",
            "",
            fenced("\n".join(summary_lines(scan, verdict))),
        ]
        picture = ranks_markdown(rank_rows(scan, verdict))
        if picture:
            out += ["", "The ranks at a glance:", "", picture]
        for number, found in enumerate(verdict.diagnoses[:3]):
            if not verdict.found:
                break
            entry = kb.entries.get(found.entry_id)
            name = f"{found.entry_id} {entry.title}" if entry else found.entry_id
            lines = "\n".join(evidence_line(scan, e, indent="") for e in evidence(found))
            label = "Diagnosis" if number == 0 else "Also consistent with"
            body = f"{found.reason} (score {shown_score(found.score):.2f})\n\n" + fenced(lines)
            out += ["", details(f"{label}: {name}", body)]
        if not verdict.found:
            out += ["", "No known failure found in these lines."]
        out.append("")
    return "\n".join(out)


def _unseen_section(data: ReportInput) -> str:
    from triage.render.document import md_inline

    items: list[str] = []
    items += [f"the {name} probe: {why}" for name, why in data.not_run.items()]
    items += [f"the {name} probe: cancelled by you" for name in data.cancelled]
    items += [
        f"the {r.name} probe: {r.summary or r.status}"
        for r in data.results
        if r.status in ("unavailable", "error")
    ]
    if data.inventory is None:
        items.append(f"the machine's inventory (driver, topology, settings): {data.inventory_why}")
    else:
        items += list(data.inventory.unseen)
    if not data.logs:
        items.append("logs: none given (`--log FILE`, one or more)")
    items += list(data.unseen)
    if not items:
        return "Nothing: every probe ran and answered."
    return "\n".join(f"- {md_inline(item)}" for item in items)
