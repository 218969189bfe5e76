"""`triage report merge`: what differs between nodes, as Markdown to paste beside the reports."""

from __future__ import annotations

from collections.abc import Sequence

from triage.core.inventory import Difference, NodeSummary, area_title
from triage.render.document import md_code


def node_labels(nodes: Sequence[NodeSummary], files: Sequence[str]) -> list[str]:
    """A column label per node: its host, or host and file when two nodes share a host name."""
    hosts = [n.host for n in nodes]
    return [
        n.host if hosts.count(n.host) == 1 else f"{n.host} ({f})" for n, f in zip(nodes, files, strict=True)
    ]


def merge_markdown(nodes: Sequence[NodeSummary], files: Sequence[str], found: Sequence[Difference]) -> str:
    """Several nodes' reports merged: what differs between the nodes."""
    labels = node_labels(nodes, files)
    out = [f"# triage report merge: {len(nodes)} nodes", ""]
    out += [f"Nodes: {', '.join(md_code(label) for label in labels)}.", ""]
    if not found:
        out += [
            "**Every compared value is the same on every node** (versions, drivers, NCCL and torch "
            "settings, launcher variables, interface MTUs, probe verdicts).",
            "",
        ]
        return "\n".join(out)
    areas = sorted({d.area for d in found}, key=lambda a: [x.area for x in found].index(a))
    out += [
        f"**{len(found)} value{'s differ' if len(found) != 1 else ' differs'} between the nodes** "
        f"({', '.join(area_title(a) for a in areas)}). A mismatch here is a common cause of a "
        "multi-node job that hangs at init or fails only across nodes.",
        "",
    ]
    for area in areas:
        out += [f"## {area_title(area)}", ""]
        out.append("| name | " + " | ".join(_cell(label) for label in labels) + " |")
        out.append("|" + "---|" * (len(labels) + 1))
        for difference in (d for d in found if d.area == area):
            values = " | ".join(_cell(v) for v in difference.values)
            out.append(f"| {_cell(difference.name)} | {values} |")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def _cell(text: str) -> str:
    return md_code(text).replace("|", "\\|")
