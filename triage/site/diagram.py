"""The decision graph drawn as SVG at build time: a small layered layout, left to right.

Columns are the longest path from the start node (the validator guarantees a DAG), the order
inside a column comes from a few barycentre sweeps to cut crossings, and rows are placed near
the mean of their parents. Good enough for ~100 nodes, no graphviz, no JavaScript to view it.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise

from triage.core.graph import exits
from triage.core.model import KnowledgeBase, ProbeNode
from triage.render.document import graph_order

BOX_W = 196
BOX_H = 46
COL_GAP = 64
ROW_GAP = 12
MARGIN = 16
CHARS_PER_LINE = 29  # at the 11px font the stylesheet sets
SWEEPS = 6


@dataclass(frozen=True)
class Box:
    """A drawn node: a graph node ("question", "probe") or an entry ("entry", "outside"). An
    entry can have several boxes (one per node leading to it); `id` is the node or entry id."""

    id: str
    kind: str
    label: str
    tooltip: str
    href: str
    layer: int
    x: float
    y: float


@dataclass(frozen=True)
class Edge:
    """One way out of a node, as the diagram draws it."""

    source: str
    target: str
    kind: str  # "answer", "unknown", "branch", "default", "fallback"
    tooltip: str


@dataclass(frozen=True)
class Route:
    """One drawn connection: every edge between the same two nodes, and the heights at which it
    crosses the columns in between (so long edges run through gaps, not over boxes)."""

    source: str
    target: str
    dashed: bool
    tooltip: str
    waypoints: tuple[tuple[float, float], ...]  # (column x, y) for each column crossed


@dataclass(frozen=True)
class Layout:
    """The placed boxes and routes of the diagram, and its size."""

    boxes: dict[str, Box]
    routes: tuple[Route, ...]
    width: float
    height: float


DASHED = frozenset({"unknown", "fallback"})
DUMMY_H = 2.0
DUMMY_GAP = 7.0


def graph_edges(kb: KnowledgeBase) -> list[Edge]:
    """Every way out of every node, in the order a reader meets them."""
    edges: list[Edge] = []
    for node_id in graph_order(kb):
        node = kb.graph.nodes[node_id]
        fact = node.fact if isinstance(node, ProbeNode) else ""
        for exit_ in exits(node):
            kind, tooltip = {
                "option": ("answer", exit_.label),
                "unknown": ("unknown", "I don't know"),
                "value": ("branch", f"{fact} = {exit_.label}"),
                "default": ("default", f"{fact}: any other value"),
                "fallback": ("fallback", "probe unavailable"),
            }[exit_.way]
            edges.append(Edge(node.id, exit_.target, kind, tooltip))
    return edges


def layout(kb: KnowledgeBase, href: Callable[[str, bool], str] | None = None) -> Layout:
    """Place every node, and a box for each entry beside every node that leads to it.

    An entry reached from several nodes is drawn once per node (each box links to the same page),
    which keeps every answer next to its question instead of a web of long edges to one leaf.
    `href(target, is_entry)` gives each box its link; without it the boxes are not links."""
    pairs: dict[tuple[str, str], list[Edge]] = {}
    for edge in graph_edges(kb):
        if edge.target in kb.graph.nodes:
            pairs.setdefault((edge.source, edge.target), []).append(edge)
        elif edge.target in kb.entries:
            pairs.setdefault((edge.source, f"{edge.target}@{edge.source}"), []).append(edge)
    ids = graph_order(kb) + list(dict.fromkeys(t for _, t in pairs if t not in kb.graph.nodes))
    layer = _layers(ids, list(pairs))

    # Long edges get a chain of dummy points, one per column crossed, laid out like nodes.
    up: dict[str, list[str]] = {i: [] for i in ids}
    down: dict[str, list[str]] = {i: [] for i in ids}
    chains: dict[tuple[str, str], list[str]] = {}
    for source, target in pairs:
        chain = [f"\0{source}>{target}>{k}" for k in range(layer[source] + 1, layer[target])]
        for k, dummy in enumerate(chain):
            layer[dummy] = layer[source] + 1 + k
            up[dummy], down[dummy] = [], []
        points = [source, *chain, target]
        for a, b in pairwise(points):
            down[a].append(b)
            up[b].append(a)
        chains[(source, target)] = chain

    columns: list[list[str]] = [[] for _ in range(max(layer.values(), default=0) + 1)]
    for node_id in layer:
        columns[layer[node_id]].append(node_id)
    _reduce_crossings(columns, up, down)
    real = set(ids)
    centre = _rows(columns, up, down, real)
    top = min(y - (BOX_H if key in real else DUMMY_H) / 2 for key, y in centre.items())
    centre = {k: v - top + MARGIN for k, v in centre.items()}

    def column_x(number: int) -> float:
        return MARGIN + number * (BOX_W + COL_GAP)

    boxes = {
        key: _box(kb, key, layer[key], column_x(layer[key]), centre[key] - BOX_H / 2, href) for key in ids
    }
    routes = tuple(
        Route(
            source,
            target,
            all(e.kind in DASHED for e in group),
            " / ".join(e.tooltip for e in group),
            tuple((column_x(layer[d]), centre[d]) for d in chains[(source, target)]),
        )
        for (source, target), group in pairs.items()
    )
    height = max(centre.values(), default=0) + BOX_H / 2 + MARGIN
    width = MARGIN * 2 + len(columns) * BOX_W + (len(columns) - 1) * COL_GAP
    return Layout(boxes, routes, width, height)


def _layers(ids: list[str], pairs: list[tuple[str, str]]) -> dict[str, int]:
    """Longest path from the roots, computed in topological order (Kahn)."""
    children: dict[str, list[str]] = {i: [] for i in ids}
    indegree = dict.fromkeys(ids, 0)
    for source, target in pairs:
        children[source].append(target)
        indegree[target] += 1
    layer = dict.fromkeys(ids, 0)
    ready = [i for i in ids if indegree[i] == 0]
    while ready:
        node_id = ready.pop(0)
        for child in children[node_id]:
            layer[child] = max(layer[child], layer[node_id] + 1)
            indegree[child] -= 1
            if indegree[child] == 0:
                ready.append(child)
    return layer


def _reduce_crossings(columns: list[list[str]], up: dict[str, list[str]], down: dict[str, list[str]]) -> None:
    """Barycentre sweeps, alternating forwards (by parents) and backwards (by children)."""
    for sweep in range(SWEEPS):
        forward = sweep % 2 == 0
        neighbours = up if forward else down
        sequence = columns[1:] if forward else list(reversed(columns[:-1]))
        for column in sequence:
            pos = {n: (i + 0.5) / len(col) for col in columns for i, n in enumerate(col)}

            def key(
                node_id: str, pos: dict[str, float] = pos, neighbours: dict[str, list[str]] = neighbours
            ) -> float:
                around = [pos[n] for n in neighbours[node_id]]
                return sum(around) / len(around) if around else pos[node_id]

            column.sort(key=key)


def _rows(
    columns: list[list[str]], up: dict[str, list[str]], down: dict[str, list[str]], real: set[str]
) -> dict[str, float]:
    """Centre heights without overlaps in a column: a few passes alternate between placing each
    node at the mean of its parents (left to right) and level with its first child (right to
    left), which reads like an outline: the start at the top left, each answer list below and
    to the right of its question."""

    def size(node_id: str) -> float:
        return BOX_H if node_id in real else DUMMY_H

    def gap(a: str, b: str) -> float:
        return (size(a) + size(b)) / 2 + (ROW_GAP if a in real and b in real else DUMMY_GAP)

    centre: dict[str, float] = {}
    for column in columns:
        y = 0.0
        for index, node_id in enumerate(column):
            y += gap(column[index - 1], node_id) if index else 0.0
            centre[node_id] = y
    for sweep in range(4):
        forward = sweep % 2 == 0
        neighbours = up if forward else down
        for column in columns if forward else reversed(columns):
            wanted = []
            for node_id in column:
                around = [centre[n] for n in neighbours[node_id]]
                if not around:
                    wanted.append(centre[node_id])
                elif forward:
                    wanted.append(sum(around) / len(around))
                else:  # level with its first child, so a question heads its answers
                    wanted.append(min(around))
            # Pushing overlaps down and pushing them up both give a valid column; their mean
            # sits closest to where the nodes wanted to be.
            pushed_down = [wanted[0]]
            for i in range(1, len(column)):
                pushed_down.append(max(wanted[i], pushed_down[-1] + gap(column[i - 1], column[i])))
            pushed_up = [wanted[-1]]
            for i in range(len(column) - 2, -1, -1):
                pushed_up.append(min(wanted[i], pushed_up[-1] - gap(column[i], column[i + 1])))
            pushed_up.reverse()
            for node_id, a, b in zip(column, pushed_down, pushed_up, strict=True):
                centre[node_id] = (a + b) / 2
    return centre


def _box(
    kb: KnowledgeBase, key: str, layer: int, x: float, y: float, href: Callable[[str, bool], str] | None
) -> Box:
    node = kb.graph.nodes.get(key)
    if node is not None:
        kind = "probe" if isinstance(node, ProbeNode) else "question"
        tip = f"{node.id}: {node.prompt}" + (
            f" (probe fact {node.fact})" if isinstance(node, ProbeNode) else ""
        )
        link = href(node.id, False) if href else ""
        return Box(node.id, kind, _plain(node.prompt), tip, link, layer, x, y)
    entry = kb.entries[key.split("@")[0]]
    kind = "entry" if entry.covered else "outside"
    link = href(entry.id, True) if href else ""
    return Box(entry.id, kind, _plain(entry.title), f"{entry.id}: {entry.title}", link, layer, x, y)


def _plain(text: str) -> str:
    return " ".join(text.replace("`", "").split())


def _wrap(text: str, width: int, lines: int) -> list[str]:
    """Greedy word wrap to at most `lines` lines; text left over ends the last line with "…"."""
    words = text.split()
    out: list[str] = []
    current = ""
    index = 0
    while index < len(words) and len(out) < lines:
        candidate = f"{current} {words[index]}".strip()
        if len(candidate) <= width:
            current = candidate
            index += 1
            continue
        if not current:  # one word longer than a line
            current = words[index][: width - 1] + "…"
            index += 1
        out.append(current)
        current = ""
    if current and len(out) < lines:
        out.append(current)
        current = ""
    if (index < len(words) or current) and out:
        last = out[-1].rstrip("…")
        out[-1] = (last if len(last) < width else last[: width - 1]).rstrip() + "…"
    return out


def _curve(x1: float, y1: float, x2: float, y2: float) -> str:
    """A cubic from (x1, y1) to (x2, y2) leaving and arriving horizontally."""
    bend = max((x2 - x1) / 2, 12)
    return f"C{x1 + bend:.1f},{y1:.1f} {x2 - bend:.1f},{y2:.1f} {x2:.1f},{y2:.1f}"


def render_svg(plan: Layout, *, css: str = "") -> str:
    """The layout as SVG markup. Inline in a page it is styled by the page's stylesheet; given
    `css` it carries its own <style> and background, to be opened or embedded as an image."""
    esc = html.escape
    parts = [
        f'<svg class="graph" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {plan.width:.0f} {plan.height:.0f}" '
        f'width="{plan.width:.0f}" height="{plan.height:.0f}" aria-labelledby="graph-svg-title">',
        '<title id="graph-svg-title">The decision graph: questions and probes from left to right, '
        "entries at the ends of the paths</title>",
    ]
    if css:
        parts.append(f"<style>{css}</style>")
        parts.append('<rect class="background" width="100%" height="100%"/>')
    parts.append(
        '<defs><marker id="arrow" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="7" markerHeight="7" '
        'orient="auto-start-reverse"><path d="M0,0 L8,4 L0,8 z" class="arrowhead"/></marker></defs>'
    )
    parts.append('<g class="edges">')
    for route in plan.routes:
        src, dst = plan.boxes[route.source], plan.boxes[route.target]
        x, y = src.x + BOX_W, src.y + BOX_H / 2
        path = [f"M{x:.1f},{y:.1f}"]
        for wx, wy in route.waypoints:
            path.append(_curve(x, y, wx, wy))
            x, y = wx + BOX_W, wy
            path.append(f"L{x:.1f},{y:.1f}")
        path.append(_curve(x, y, dst.x - 2, dst.y + BOX_H / 2))
        kind = "edge dashed" if route.dashed else "edge"
        tip = f"{route.source} → {route.target}: {route.tooltip}"
        parts.append(
            f'<path class="{kind}" d="{" ".join(path)}" marker-end="url(#arrow)"><title>{esc(tip)}</title></path>'
        )
    parts.append("</g>")
    parts.append('<g class="nodes">')
    for box in plan.boxes.values():
        lines = _wrap(box.label, CHARS_PER_LINE - (5 if box.kind in ("entry", "outside") else 0), 2)
        opening = (
            f'<a href="{esc(box.href)}" class="node {box.kind}">'
            if box.href
            else f'<g class="node {box.kind}">'
        )
        parts.append(f"{opening}<title>{esc(box.tooltip)}</title>")
        parts.append(
            f'<rect x="{box.x:.1f}" y="{box.y:.1f}" width="{BOX_W}" height="{BOX_H}" rx="{6 if box.kind in ("question", "probe") else 3}"/>'
        )
        text_x = box.x + 8
        first_y = box.y + (BOX_H / 2 - 7 * (len(lines) - 1)) + 4
        if box.kind in ("entry", "outside"):
            parts.append(f'<text class="id" x="{text_x:.1f}" y="{first_y:.1f}">{esc(box.id)}</text>')
            text_x += 34
        for number, line in enumerate(lines):
            parts.append(f'<text x="{text_x:.1f}" y="{first_y + number * 14:.1f}">{esc(line)}</text>')
        parts.append("</a>" if box.href else "</g>")
    parts.append("</g></svg>")
    return "\n".join(parts)
