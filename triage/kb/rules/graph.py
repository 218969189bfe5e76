"""Rules about the decision graph's wiring: targets resolve, no cycles, everything reachable."""

from __future__ import annotations

import re
from collections.abc import Iterator

from triage.core.graph import back_edges, exits, reachable
from triage.core.model import ProbeNode, QuestionNode
from triage.kb.rules.context import Context, yaml_key
from triage.kb.rules.registry import Finding, rule


def _path(field: str) -> list[object]:
    """An exit's field as keys into the node: options[0].target -> ["options", 0, "target"]."""
    keys: list[object] = [int(k) if k.isdigit() else k for k in re.findall(r"[^.\[\]]+", field)]
    if keys[0] == "branches" and len(keys) == 2:
        keys[1] = yaml_key(str(keys[1]))
    return keys


@rule(
    "KB001",
    "start-is-node",
    finds="a graph whose `start:` is not one of its nodes",
    why="every walk begins there; without it no walk can begin",
    fix="point start at a question node",
)
def start_is_node(ctx: Context) -> Iterator[Finding]:
    """Report a graph whose `start:` is not one of its nodes."""
    graph, src = ctx.graph, ctx.graph_file
    if graph is not None and graph.start and graph.start not in graph.nodes:
        yield Finding(src, ctx.line(src, "start"), "start", f"{graph.start!r} is not a node")


@rule(
    "KB001",
    "target-resolves",
    finds="an option, branch, default, unknown or fallback whose target is neither a node nor an entry",
    why="a walk that takes it would stop with an error instead of an answer",
    fix="fix the spelling, or add the node or entry",
)
def target_resolves(ctx: Context) -> Iterator[Finding]:
    """Report an option, branch, default, unknown or fallback whose target is neither a node nor an entry."""
    graph, src = ctx.graph, ctx.graph_file
    if graph is None:
        return
    for node in graph.nodes.values():
        for exit_ in exits(node):
            if exit_.target not in graph.nodes and exit_.target not in ctx.entries:
                yield Finding(
                    src,
                    ctx.line(src, "nodes", node.id, *_path(exit_.field)),
                    f"nodes.{node.id}.{exit_.field}",
                    f"{exit_.target!r} is neither a node nor an entry id",
                )


@rule(
    "KB018",
    "fallback-is-question",
    finds="a probe node whose `fallback:` is another probe node",
    why="the fallback is asked when the probe cannot run, so it must be a question the user answers",
    fix="point fallback at a question node",
)
def fallback_is_question(ctx: Context) -> Iterator[Finding]:
    """Report a probe node whose `fallback:` is another probe node."""
    graph, src = ctx.graph, ctx.graph_file
    if graph is None:
        return
    for node in graph.nodes.values():
        if isinstance(node, ProbeNode):
            fallback = graph.nodes.get(node.fallback)
            if fallback is not None and not isinstance(fallback, QuestionNode):
                yield Finding(
                    src,
                    ctx.line(src, "nodes", node.id, "fallback"),
                    f"nodes.{node.id}.fallback",
                    f"{node.fallback!r} is not a question node",
                )


@rule(
    "KB002",
    "no-cycles",
    finds="a path through the graph that leads back to a node already on it",
    why="a walk along it would never reach an entry",
    fix="every path must end at an entry; point one edge forward",
)
def no_cycles(ctx: Context) -> Iterator[Finding]:
    """Report a path through the graph that leads back to a node already on it."""
    graph, src = ctx.graph, ctx.graph_file
    if graph is None:
        return
    for node_id, child in back_edges(graph):
        yield Finding(
            src,
            ctx.line(src, "nodes", node_id),
            f"nodes.{node_id}",
            f"leads back to {child!r}, forming a cycle",
        )


@rule(
    "KB003",
    "node-reachable",
    finds="a graph node no path from the start leads to",
    why="no walk can reach it, so its question is dead weight and its targets may be orphaned",
    fix="link it from a question or probe node, or remove it",
)
def node_reachable(ctx: Context) -> Iterator[Finding]:
    """Report a graph node no path from the start leads to."""
    graph, src = ctx.graph, ctx.graph_file
    if graph is None or graph.start not in graph.nodes:  # start-is-node reports that
        return
    seen, _ = reachable(graph)
    for node_id in graph.nodes:
        if node_id not in seen:
            yield Finding(
                src, ctx.line(src, "nodes", node_id), f"nodes.{node_id}", "is not reachable from start"
            )


@rule(
    "KB003",
    "entry-reachable",
    finds="an entry no path through the graph leads to",
    why="`triage walk`, the app and the site's graph could never reach it",
    fix="add an option or branch whose target is the entry",
)
def entry_reachable(ctx: Context) -> Iterator[Finding]:
    """Report an entry no path through the graph leads to."""
    graph, src = ctx.graph, ctx.graph_file
    if graph is None or graph.start not in graph.nodes:  # start-is-node reports that
        return
    _, leaves = reachable(graph)
    for entry_id in ctx.entries:
        if entry_id not in leaves:
            yield Finding(
                src,
                0,
                entry_id,
                f"entry {entry_id} is not reachable in the graph",
                f"add an option or branch whose target is {entry_id}",
            )
