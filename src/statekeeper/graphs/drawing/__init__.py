"""Draw a LangGraph graph offline: SVG, Mermaid text or plain text, in pure Python.

>>> from statekeeper.graphs import load_graph
>>> from statekeeper.graphs.drawing import render_svg
>>> drawable = load_graph("examples.approval_agent:graph").get_graph()  # doctest: +SKIP
>>> svg = render_svg(drawable, current={"agent"}, next={"tools"})  # doctest: +SKIP

Each function takes LangGraph's drawable graph, ``compiled.get_graph(xray=...)`` (a
``langchain_core.runnables.graph.Graph``). Nothing is fetched and no drawing library is
used (LangGraph's own ``draw_mermaid_png`` calls a web service; ``draw_ascii`` needs
grandalf): the layout is a small Sugiyama-style one of this package.

Guarantees:

- **Deterministic**: the same graph gives the same output, byte for byte.
- **Layered**: nodes are placed in layers by their longest path from ``__start__``
  (cycles broken at the back edges of a depth-first search); every edge that is not a back
  edge goes down, back edges go up, no route crosses a node and no two boxes overlap.
  With ``xray``, the nodes of a subgraph (ids ``child:a``) are drawn inside one box.
- **Inert and safe**: node names and edge labels may come from anyone. Control, format
  (bidi) and unassigned characters are shown as ``\\u202e``-style escapes (never
  interpreted), every text is XML-escaped, and the SVG holds no script, link, external
  resource or ``<style>`` element (colours are presentation attributes, which a
  Content-Security-Policy of ``default-src 'self'`` allows). Long names are cut with an
  ellipsis in the box; the full name is the node's ``<title>`` (its tooltip).
- **Addressable**: every node is a ``<g class="node" id="sk-node-NAME" data-node="NAME">``
  (``data-node``: the node id, hidden characters escaped as above; ``id``: unique, made of
  letters, digits, ``_.-``, with a hash of the name when the name has other characters);
  every edge a ``<g class="edge">`` (``conditional`` ones dashed, ``back`` ones going up,
  ``loop``) with ``data-source`` and ``data-target``; every subgraph a
  ``<g class="cluster" data-cluster="child">``.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from typing import Any

from langchain_core.runnables.graph import Graph

from statekeeper.graphs.drawing._columns import Sizes
from statekeeper.graphs.drawing._layout import Layout, layout
from statekeeper.graphs.drawing._order import END, START, Ordering, Spec, order
from statekeeper.graphs.drawing._svg import (
    CHAR,
    FONT_SIZE,
    LABEL_SIZE,
    MARKS,
    ClusterView,
    EdgeView,
    NodeView,
    Scene,
    svg,
)

__all__ = ["describe", "render_ascii", "render_mermaid", "render_svg"]

MAX_LABEL = 28  # columns of a node name shown in its box
MAX_EDGE_LABEL = 24  # columns of an edge label
NODE_HEIGHT = 34.0
_PAD = 14.0  # between a box's border and its name
_HIDDEN = {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"}  # shown as escapes, never as themselves


def render_svg(graph: Graph, *, current: Iterable[str] = (), next: Iterable[str] = ()) -> str:
    """The graph as a standalone SVG document (a ``str`` ending in a newline).

    ``current`` and ``next`` name nodes to highlight (classes ``current`` and ``next``,
    each with its own colours and a legend below the drawing), by node id (``tools``, or
    ``child:a`` inside an xray subgraph); a subgraph's id (``child``) highlights its box.
    Names the drawing does not have are ignored; a single string is one name.
    """
    marks = {"current": _names(current), "next": _names(next)}
    spec, edges = _spec(graph)
    ordering = order(spec)
    placed = _layout(graph, spec, edges, ordering)
    legend = tuple(mark for mark in MARKS if marks[mark])
    return svg(placed, _scene(graph, spec, edges, marks, legend))


def render_mermaid(graph: Graph) -> str:
    """The graph as Mermaid ``flowchart TD`` text: nodes ``n0, n1...`` in graph order with
    their names as quoted labels (characters Mermaid would read escaped as ``#35;``),
    xray subgraphs as ``subgraph`` blocks, conditional edges dotted, labels on edges."""
    spec, edges = _spec(graph)
    ids = {node: f"n{i}" for i, node in enumerate(spec.nodes)}
    lines = ["flowchart TD"]
    clusters = _clusters(spec)
    for node in spec.nodes:
        if not spec.paths.get(node):
            lines.append(f"    {_mermaid_node(graph, node, ids[node])}")
    for cluster, path in clusters.items():
        if len(path) == 1:
            lines += _mermaid_block(graph, spec, cluster, ids, depth=1)
    for edge in edges:
        arrow = "-.->" if edge.conditional else "-->"
        label = f'|"{_mermaid_text(_printable(str(edge.data)))}"|' if edge.data is not None else ""
        lines.append(f"    {ids[edge.source]} {arrow}{label} {ids[edge.target]}")
    lines += ["    classDef first fill-opacity:0", "    classDef last fill:#bfb6fc"]
    return "\n".join(lines) + "\n"


def render_ascii(graph: Graph) -> str:
    """The graph as plain text for a terminal: its layers top to bottom (``(__start__)``
    and ``[node]``), each followed by the edges leaving its nodes (``-->``, ``..>`` when
    conditional, ``"label"``, ``(up)`` for an edge back to an earlier layer)."""
    spec, edges = _spec(graph)
    ordering = order(spec)
    width = len(str(len(ordering.layers) - 1))
    lines = []
    for layer in range(len(ordering.layers)):
        names = ordering.nodes(layer)
        boxes = "  ".join(_ascii_box(graph, node) for node in names)
        lines.append(f"{layer:>{width}}  {boxes}")
        for node in names:
            for index, edge in enumerate(edges):
                if edge.source == node:
                    lines.append(" " * (width + 4) + _ascii_edge(edge, ordering, index))
    lines += ["", "--> edge   ..> conditional edge   (up) back to an earlier layer"]
    return "\n".join(lines) + "\n"


def describe(graph: Graph) -> dict[str, Any]:
    """The graph as JSON-ready data: its layers (node ids, left to right), nodes (id,
    name, layer, enclosing subgraphs) and edges (source, target, conditional, label, and
    whether it goes ``back`` up), in graph order. Names are as given, not escaped."""
    spec, edges = _spec(graph)
    ordering = order(spec)
    return {
        "layers": [ordering.nodes(layer) for layer in range(len(ordering.layers))],
        "nodes": [
            {
                "id": node,
                "name": _name(graph, node),
                "layer": ordering.rank[node],
                "subgraphs": list(spec.paths.get(node, ())),
            }
            for node in spec.nodes
        ],
        "edges": [
            {
                "source": edge.source,
                "target": edge.target,
                "conditional": edge.conditional,
                "label": None if edge.data is None else str(edge.data),
                "back": ordering.back[index],
            }
            for index, edge in enumerate(edges)
        ],
    }


def _names(names: Iterable[str]) -> frozenset[str]:
    return frozenset([names] if isinstance(names, str) else names)


def _spec(graph: Graph) -> tuple[Spec, list[Any]]:
    """The layout's view of ``graph``; an edge to a node the graph does not list adds it."""
    nodes = list(graph.nodes)
    edges = list(graph.edges)
    known = set(nodes)
    for edge in edges:
        for end in (edge.source, edge.target):
            if end not in known:
                nodes.append(end)
                known.add(end)
    paths = {node: _path(node) for node in nodes if ":" in node}
    pairs = tuple((edge.source, edge.target) for edge in edges)
    return Spec(tuple(nodes), pairs, paths), edges


def _path(node: str) -> tuple[str, ...]:
    """The subgraphs around an xray node: ``a:b:c`` is inside ``a`` and ``a:b``."""
    parts = node.split(":")
    return tuple(":".join(parts[:depth]) for depth in range(1, len(parts)))


def _clusters(spec: Spec) -> dict[str, tuple[str, ...]]:
    """Every subgraph with its path (itself last), in order of first appearance."""
    found: dict[str, tuple[str, ...]] = {}
    for node in spec.nodes:
        path = spec.paths.get(node, ())
        for depth in range(len(path)):
            found.setdefault(path[depth], path[: depth + 1])
    return found


def _name(graph: Graph, node: str) -> str:
    found = graph.nodes.get(node)
    return found.name if found is not None else node


def _kind(graph: Graph, node: str) -> str:
    return {START: "start", END: "end"}.get(_name(graph, node), "node")


def _printable(text: str) -> str:
    """``text`` with every control, format (bidi, zero-width), surrogate, private-use or
    unassigned character, and every line or paragraph separator, written as an escape."""
    return "".join(_escape(ch) if unicodedata.category(ch) in _HIDDEN else ch for ch in text)


def _escape(ch: str) -> str:
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _columns(text: str) -> int:
    """How many monospace columns ``text`` takes: wide characters two, combining none."""
    return sum(_width(ch) for ch in text)


def _width(ch: str) -> int:
    if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me"):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def _clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` columns, an ellipsis marking the cut."""
    if _columns(text) <= limit:
        return text
    kept, used = [], 0
    for ch in text:
        used += _width(ch)
        if used > limit - 1:
            break
        kept.append(ch)
    return "".join(kept) + "…"


def _node_label(graph: Graph, node: str) -> str:
    return _clip(_printable(_name(graph, node)), MAX_LABEL)


def _edge_label(edge: Any) -> str | None:
    return None if edge.data is None else _clip(_printable(str(edge.data)), MAX_EDGE_LABEL)


def _layout(graph: Graph, spec: Spec, edges: list[Any], ordering: Ordering) -> Layout:
    char, small = CHAR * FONT_SIZE, CHAR * LABEL_SIZE
    widths = {}
    for node in spec.nodes:
        ends = NODE_HEIGHT / 2 if _kind(graph, node) != "node" else 0.0
        widths[node] = max(56.0, _columns(_node_label(graph, node)) * char + 2 * _PAD + ends)
    labels = [
        None if (text := _edge_label(edge)) is None else (_columns(text) * small + 10, 16.0)
        for edge in edges
    ]
    clusters = {c: _columns(_cluster_label(c)) * small for c in _clusters(spec)}
    return layout(ordering, Sizes(widths, NODE_HEIGHT, labels, clusters))


def _cluster_label(cluster: str) -> str:
    return _clip(_printable(cluster.rpartition(":")[2]), MAX_LABEL)


def _scene(
    graph: Graph,
    spec: Spec,
    edges: list[Any],
    marks: dict[str, frozenset[str]],
    legend: tuple[str, ...],
) -> Scene:
    def marked(name: str) -> tuple[str, ...]:
        return tuple(mark for mark in MARKS if name in marks[mark])

    nodes = {
        node: NodeView(
            _printable(node),
            _node_label(graph, node),
            _node_title(graph, node),
            _kind(graph, node),
            marked(node),
        )
        for node in spec.nodes
    }
    views = [
        EdgeView(
            _printable(edge.source),
            _printable(edge.target),
            bool(edge.conditional),
            _edge_label(edge),
            _edge_title(edge),
        )
        for edge in edges
    ]
    clusters = {
        c: ClusterView(_printable(c), _cluster_label(c), f"subgraph {_printable(c)}", marked(c))
        for c in _clusters(spec)
    }
    title = f"graph: {len(spec.nodes)} nodes, {len(edges)} edges"
    return Scene(nodes, views, clusters, title, legend)


def _node_title(graph: Graph, node: str) -> str:
    lines = [_printable(node)]
    found = graph.nodes.get(node)
    for key, value in ((found.metadata or {}) if found is not None else {}).items():
        shown = ", ".join(map(str, value)) if isinstance(value, list | tuple) else str(value)
        lines.append(_printable(f"{key} = {shown}"))
    return "\n".join(lines)


def _edge_title(edge: Any) -> str:
    kind = "conditional edge" if edge.conditional else "edge"
    title = f"{kind} {_printable(edge.source)} → {_printable(edge.target)}"
    return title if edge.data is None else f"{title}: {_printable(str(edge.data))}"


# Mermaid: a quoted label may hold anything but these ASCII characters, written #NN;
_MERMAID_SAFE = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _-.,:/()?!+=*@$%^~"
)


def _mermaid_text(text: str) -> str:
    return "".join(ch if ch in _MERMAID_SAFE or ord(ch) > 127 else f"#{ord(ch)};" for ch in text)


def _mermaid_node(graph: Graph, node: str, ident: str) -> str:
    label = _mermaid_text(_printable(_name(graph, node)))
    kind = _kind(graph, node)
    if kind == "node":
        return f'{ident}("{label}")'
    return f'{ident}(["{label}"]):::{"first" if kind == "start" else "last"}'


def _mermaid_block(
    graph: Graph, spec: Spec, cluster: str, ids: dict[str, str], *, depth: int
) -> list[str]:
    """A ``subgraph`` block: its own nodes, then its inner subgraphs' blocks."""
    clusters = _clusters(spec)
    indent = "    " * depth
    label = _mermaid_text(_printable(cluster.rpartition(":")[2]))
    lines = [f'{indent}subgraph s{list(clusters).index(cluster)}["{label}"]']
    for node in spec.nodes:
        if spec.paths.get(node, ())[-1:] == (cluster,):
            lines.append(f"{indent}    {_mermaid_node(graph, node, ids[node])}")
    for inner, path in clusters.items():
        if path[:-1] == clusters[cluster]:
            lines += _mermaid_block(graph, spec, inner, ids, depth=depth + 1)
    lines.append(f"{indent}end")
    return lines


def _ascii_box(graph: Graph, node: str) -> str:
    shown = _clip(_printable(node), 2 * MAX_LABEL)
    return f"({shown})" if _kind(graph, node) != "node" else f"[{shown}]"


def _ascii_edge(edge: Any, ordering: Ordering, index: int) -> str:
    arrow = "..>" if edge.conditional else "-->"
    text = f"{_printable(edge.source)} {arrow} {_printable(edge.target)}"
    if edge.data is not None:
        text += f'  "{_printable(str(edge.data))}"'
    if ordering.back[index]:
        text += "  (up)"
    return text
