"""SVG markup for a laid-out graph.

Self-contained and inert: no script, no event attribute, no link, no external resource,
no ``<style>`` element or ``style`` attribute. Colours and dashes are presentation
attributes, which a Content-Security-Policy never blocks (an inline ``<style>`` in an SVG
inlined into a page served with ``default-src 'self'`` would be); every element also has
a class (``node``, ``edge conditional``, ``current``...) for a page's own stylesheet.
Every text and attribute value is XML-escaped here; texts arrive printable (no control or
bidi characters: see ``statekeeper.graphs.drawing``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from statekeeper.graphs.drawing._layout import Layout, Rect, Route

FONT = "ui-monospace, SFMono-Regular, Menlo, Consolas, 'DejaVu Sans Mono', monospace"
FONT_SIZE = 13.0
LABEL_SIZE = 11.0
CHAR = 0.6  # a monospace character's width, in ems
LEGEND = 30.0  # the legend's height below the drawing
MARKS = ("current", "next")

_NODE = {"fill": "#f2f0ff", "stroke": "#6d5dd3", "stroke-width": "1.2"}
_KIND = {"start": {"fill": "#ffffff"}, "end": {"fill": "#bfb6fc"}, "node": {}}
# the inspector's colours for the same marks: green for what ran, amber for what is next
_MARK = {
    "current": {"fill": "#bbf7d0", "stroke": "#15803d", "stroke-width": "2.5"},
    "next": {
        "fill": "#fde68a",
        "stroke": "#b45309",
        "stroke-width": "2.5",
        "stroke-dasharray": "6 3",
    },
}
_CLUSTER = {"fill": "#f8fafc", "stroke": "#94a3b8", "stroke-width": "1"}
_EDGE = {"fill": "none", "stroke": "#475569", "stroke-width": "1.3"}
_TEXT = "#1e293b"
_MUTED = "#64748b"
_ARROW = "sk-graph-arrow"


@dataclass(frozen=True)
class NodeView:
    """A node as drawn: its id, shown label (maybe cut) and full title, kind (``node``,
    ``start`` or ``end``) and highlight marks (``current``, ``next``)."""

    node: str
    label: str
    title: str
    kind: str = "node"
    marks: tuple[str, ...] = ()


@dataclass(frozen=True)
class EdgeView:
    source: str
    target: str
    conditional: bool
    label: str | None
    title: str


@dataclass(frozen=True)
class ClusterView:
    cluster: str
    label: str
    title: str
    marks: tuple[str, ...] = ()


@dataclass(frozen=True)
class Scene:
    """What to write on the layout: views by node id (as laid out), edges in layout
    order, subgraphs by id, the drawing's title, and the marks the legend explains."""

    nodes: Mapping[str, NodeView]
    edges: Sequence[EdgeView]
    clusters: Mapping[str, ClusterView]
    title: str
    legend: tuple[str, ...]


def svg(layout: Layout, scene: Scene) -> str:
    """The whole SVG document for ``layout`` labelled by ``scene``."""
    width = max(layout.width, _legend_width(scene.legend))
    height = layout.height + (LEGEND if scene.legend else 0.0)
    ids = _DomIds()
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="statekeeper-graph" '
        f'width="{_n(width)}" height="{_n(height)}" viewBox="0 0 {_n(width)} {_n(height)}" '
        f'role="img" font-family="{_esc(FONT)}" font-size="{_n(FONT_SIZE)}">',
        f"<title>{_esc(scene.title)}</title>",
        f'<defs><marker id="{_ARROW}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse">'
        f'<path d="M0,0 L10,5 L0,10 z" fill="{_EDGE["stroke"]}"/></marker></defs>',
        f'<rect class="background" width="{_n(width)}" height="{_n(height)}" fill="#ffffff"/>',
        '<g class="clusters">',
        *(_cluster(scene.clusters[name], box, ids) for name, box in layout.clusters),
        '</g>\n<g class="edges">',
        *(
            _edge(view, route, label)
            for view, route, label in zip(scene.edges, layout.routes, layout.labels, strict=True)
        ),
        '</g>\n<g class="nodes">',
        *(_node(scene.nodes[node], box, ids) for node, box in layout.boxes.items()),
        "</g>",
    ]
    if scene.legend:
        parts.append(_legend(scene.legend, layout.height))
    parts.append("</svg>\n")
    return "\n".join(parts)


def _cluster(view: ClusterView, box: Rect, ids: _DomIds) -> str:
    style = dict(_CLUSTER)
    for mark in view.marks:
        style.update({k: v for k, v in _MARK[mark].items() if k != "fill"})
    return (
        f'<g class="{_classes("cluster", view.marks)}" id="{ids.get("cluster", view.cluster)}" '
        f'data-cluster="{_esc(view.cluster)}"><title>{_esc(view.title)}</title>'
        f"{_rect(box, 8, style)}"
        f'<text x="{_n(box.x + 10)}" y="{_n(box.y + 15)}" fill="{_MUTED}" '
        f'font-size="{_n(LABEL_SIZE)}">{_esc(view.label)}</text></g>'
    )


def _edge(view: EdgeView, route: Route, label: Rect | None) -> str:
    kinds = [k for k, on in (("conditional", view.conditional), ("back", route.back)) if on]
    kinds += ["loop"] if route.loop else []
    style = dict(_EDGE, **({"stroke-dasharray": "6 4"} if view.conditional else {}))
    if route.loop:
        start, c1, c2, end = route.points
        d = f"M{_p(start)} C{_p(c1)} {_p(c2)} {_p(end)}"
    else:
        d = "M" + " L".join(_p(point) for point in route.points)
    text = ""
    if label is not None and view.label is not None:
        text = (
            f"{_rect(label, 3, {'fill': '#ffffff', 'fill-opacity': '0.9'}, 'label-bg')}"
            f'<text class="label" x="{_n(label.cx)}" y="{_n(label.cy)}" text-anchor="middle" '
            f'dominant-baseline="central" font-size="{_n(LABEL_SIZE)}" fill="{_TEXT}">'
            f"{_esc(view.label)}</text>"
        )
    return (
        f'<g class="{_classes("edge", tuple(kinds))}" data-source="{_esc(view.source)}" '
        f'data-target="{_esc(view.target)}"><title>{_esc(view.title)}</title>'
        f'<path d="{d}"{_attrs(style)} marker-end="url(#{_ARROW})"/>{text}</g>'
    )


def _node(view: NodeView, box: Rect, ids: _DomIds) -> str:
    style = dict(_NODE, **_KIND[view.kind])
    for mark in view.marks:
        style.update(_MARK[mark])
    kind = () if view.kind == "node" else ("terminal", view.kind)
    return (
        f'<g class="{_classes("node", (*kind, *view.marks))}" id="{ids.get("node", view.node)}" '
        f'data-node="{_esc(view.node)}"><title>{_esc(view.title)}</title>'
        f"{_rect(box, box.h / 2 if view.kind != 'node' else 6, style)}"
        f'<text x="{_n(box.cx)}" y="{_n(box.cy)}" text-anchor="middle" '
        f'dominant-baseline="central" fill="{_TEXT}">{_esc(view.label)}</text></g>'
    )


def _legend(marks: tuple[str, ...], top: float) -> str:
    parts = ['<g class="legend">']
    x = 12.0
    for mark in marks:
        style = dict(_NODE, **_MARK[mark])
        parts.append(
            f'<g class="{mark}">{_rect(Rect(x, top + 6, 18, 14), 3, style)}'
            f'<text x="{_n(x + 24)}" y="{_n(top + 13)}" dominant-baseline="central" '
            f'font-size="{_n(LABEL_SIZE)}" fill="{_TEXT}">{mark}</text></g>'
        )
        x += _legend_step(mark)
    parts.append("</g>")
    return "".join(parts)


def _legend_step(mark: str) -> float:
    return 24 + len(mark) * CHAR * LABEL_SIZE + 20


def _legend_width(marks: tuple[str, ...]) -> float:
    return 12 + sum(_legend_step(mark) for mark in marks) if marks else 0.0


def _rect(box: Rect, radius: float, style: Mapping[str, str], cls: str | None = None) -> str:
    klass = f' class="{cls}"' if cls else ""
    return (
        f'<rect{klass} x="{_n(box.x)}" y="{_n(box.y)}" width="{_n(box.w)}" height="{_n(box.h)}" '
        f'rx="{_n(radius)}"{_attrs(style)}/>'
    )


def _attrs(style: Mapping[str, str]) -> str:
    return "".join(f' {name}="{value}"' for name, value in style.items())


def _classes(first: str, more: tuple[str, ...]) -> str:
    return " ".join((first, *more))


def _n(value: float) -> str:
    """A coordinate with one decimal at most: short, and the same bytes every time."""
    text = f"{value:.1f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def _p(point: tuple[float, float]) -> str:
    return f"{_n(point[0])},{_n(point[1])}"


_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}


def _esc(text: str) -> str:
    """``text`` safe in XML content and in a double-quoted attribute (newlines in an
    attribute kept as character references, which attribute normalisation keeps)."""
    escaped = "".join(_ESCAPES.get(ch, ch) for ch in text)
    return escaped.replace("\n", "&#10;").replace("\t", "&#9;")


class _DomIds:
    """Unique, stable element ids: ``sk-node-agent``; a name with other characters than
    letters, digits, ``_``, ``.`` and ``-`` keeps those and gets a hash of the name."""

    def __init__(self) -> None:
        self._used: set[str] = set()

    def get(self, kind: str, name: str) -> str:
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name)
        if safe != name or not safe:
            safe += "-" + hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        candidate, n = f"sk-{kind}-{safe}", 1
        while candidate in self._used:
            n += 1
            candidate = f"sk-{kind}-{safe}-{n}"
        self._used.add(candidate)
        return candidate
