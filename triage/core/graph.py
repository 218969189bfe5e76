"""The decision graph's shape: every way out of a node, and the orders and paths through it.

The one place that knows which fields of a node lead somewhere. Validation (cycles,
reachability, dangling targets), the Markdown pages, and the site's diagram all read the graph
through these functions, so a new kind of exit is added here once.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal, NamedTuple

from triage.core.model import Graph, Node, QuestionNode

Way = Literal["option", "unknown", "value", "default", "fallback"]


class Exit(NamedTuple):
    """One way out of a node: an option, "I don't know", a fact value, the default or the fallback."""

    way: Way
    label: str  # the option's label or the fact's value; empty for the other ways
    target: str  # a node id or an entry id
    field: str  # where it is written in graph.yaml, relative to the node (options[0].target)


def exits(node: Node) -> list[Exit]:
    """Every way out of `node` with a target, in the order a reader meets them."""
    if isinstance(node, QuestionNode):
        out = [Exit("option", o.label, o.target, f"options[{i}].target") for i, o in enumerate(node.options)]
        if node.unknown:
            out.append(Exit("unknown", "", node.unknown, "unknown"))
        return [e for e in out if e.target]
    out = [Exit("value", value, target, f"branches.{value}") for value, target in node.branches.items()]
    if node.default:
        out.append(Exit("default", "", node.default, "default"))
    if node.fallback:
        out.append(Exit("fallback", "", node.fallback, "fallback"))
    return [e for e in out if e.target]


def breadth_first(graph: Graph) -> list[str]:
    """Node ids breadth-first from the start, then any the walk did not reach, in file order."""
    return list(_memo(graph)[1])


def _breadth_first(graph: Graph) -> list[str]:
    order: list[str] = []
    seen = {graph.start}
    queue = [graph.start] if graph.start in graph.nodes else []
    while queue:
        node_id = queue.pop(0)
        order.append(node_id)
        for exit_ in exits(graph.nodes[node_id]):
            if exit_.target in graph.nodes and exit_.target not in seen:
                seen.add(exit_.target)
                queue.append(exit_.target)
    return order + [n for n in graph.nodes if n not in seen]


def reachable(graph: Graph) -> tuple[set[str], set[str]]:
    """(node ids, leaf targets) reachable from the start; leaves are targets that are not nodes."""
    nodes: set[str] = set()
    leaves: set[str] = set()
    frontier = [graph.start] if graph.start in graph.nodes else []
    while frontier:
        node_id = frontier.pop()
        if node_id in nodes:
            continue
        nodes.add(node_id)
        for exit_ in exits(graph.nodes[node_id]):
            if exit_.target in graph.nodes:
                frontier.append(exit_.target)
            else:
                leaves.add(exit_.target)
    return nodes, leaves


def back_edges(graph: Graph) -> Iterator[tuple[str, str]]:
    """(node, child) for each edge that closes a cycle (an iterative depth-first search)."""
    children = {
        n: [e.target for e in exits(node) if e.target in graph.nodes] for n, node in graph.nodes.items()
    }
    colour: dict[str, int] = {}  # 1: on the current path, 2: finished
    for root in graph.nodes:
        if colour.get(root):
            continue
        stack: list[tuple[str, int]] = [(root, 0)]
        colour[root] = 1
        while stack:
            node_id, index = stack.pop()
            below = children[node_id]
            if index < len(below):
                stack.append((node_id, index + 1))
                child = below[index]
                if colour.get(child) == 1:
                    yield node_id, child
                elif not colour.get(child):
                    colour[child] = 1
                    stack.append((child, 0))
            else:
                colour[node_id] = 2


Incoming = dict[str, list[tuple[Node, list[Exit]]]]


def incoming(graph: Graph) -> Incoming:
    """For each target, the nodes leading to it (in breadth-first order) and by which exits."""
    return _memo(graph)[2]


# The last graph's order and incoming exits: a site build asks for them once per entry.
_MEMO: dict[int, tuple[Graph, list[str], Incoming]] = {}


def _memo(graph: Graph) -> tuple[Graph, list[str], Incoming]:
    memo = _MEMO.get(id(graph))
    if memo is None or memo[0] is not graph:
        order = _breadth_first(graph)
        memo = (graph, order, _incoming(graph, order))
        _MEMO.clear()
        _MEMO[id(graph)] = memo
    return memo


def _incoming(graph: Graph, order: list[str]) -> Incoming:
    result: Incoming = {}
    for node_id in order:
        node = graph.nodes[node_id]
        by_target: dict[str, list[Exit]] = {}
        for exit_ in exits(node):
            by_target.setdefault(exit_.target, []).append(exit_)
        for target, ways in by_target.items():
            result.setdefault(target, []).append((node, ways))
    return result
