"""Coordinates for an ordered graph (the last steps of a Sugiyama layout): boxes, subgraph
boxes, edge routes and edge label places. Pure and deterministic.

Horizontal positions come from ``_columns``. Vertically, every layer is a band as high
as a node; the gap below a band makes room for the subgraph boxes that end and start
there and, when an edge label sits in it, for the label. Routes leave a box by its bottom
(or top) side and enter one by its top (or bottom) side, passing through their dummies'
slots, so they never cross a node: within a band a route is vertical in its own slot,
between bands it is in the gap.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

from statekeeper.graphs.drawing._columns import (
    LOOP,
    LOOP_STEP,
    PAD,
    Point,
    Sizes,
    horizontal,
    loop_room,
    loops,
)
from statekeeper.graphs.drawing._order import Ordering

CLUSTER_LABEL = 18.0  # the subgraph name's line at the top of its box
GAP = 50.0  # between two layers
LABEL_GAP = 22.0  # more, where edge labels sit
PARALLEL = 10.0  # between edges joining the same two nodes
MARGIN = 12.0


@dataclass(frozen=True)
class Rect:
    x: float
    y: float
    w: float
    h: float

    @property
    def cx(self) -> float:
        return self.x + self.w / 2

    @property
    def cy(self) -> float:
        return self.y + self.h / 2

    def moved(self, dx: float, dy: float) -> Rect:
        return Rect(self.x + dx, self.y + dy, self.w, self.h)


@dataclass(frozen=True)
class Route:
    """An edge's path from its source to its target: a polyline, or for a self-loop
    (``loop``) a cubic Bézier ``start, control, control, end``. ``back``: it goes up."""

    points: tuple[Point, ...]
    back: bool = False
    loop: bool = False


@dataclass(frozen=True)
class Layout:
    """Everything placed, in a ``width`` x ``height`` area with the origin top left.
    ``clusters``: subgraph boxes, outer before inner; ``routes`` and ``labels`` by edge."""

    width: float
    height: float
    boxes: dict[str, Rect]
    clusters: list[tuple[str, Rect]]
    routes: list[Route]
    labels: list[Rect | None]


def layout(ordering: Ordering, sizes: Sizes) -> Layout:
    """Place ``ordering`` with the ``sizes`` of its boxes and labels."""
    x = horizontal(ordering, sizes)
    rows, free = _vertical(ordering, sizes)
    items = ordering.items
    boxes = {
        item.node: Rect(
            x[i] - sizes.widths[item.node] / 2,
            rows[item.rank],
            sizes.widths[item.node],
            sizes.height,
        )
        for i, item in enumerate(items)
        if item.node is not None
    }
    clusters = _cluster_boxes(ordering, x, rows, sizes.height)
    routes = _routes(ordering, x, rows, sizes.height, boxes)
    labels = _labels(ordering, routes, sizes, free, boxes)
    return _framed(boxes, clusters, routes, labels)


def _cluster_reach(ordering: Ordering) -> tuple[dict[str, tuple[int, int]], dict[str, Point]]:
    """Each subgraph's first and last layer, and how far its box reaches above its first
    band and below its last one (nested boxes that start or end there included)."""
    span: dict[str, tuple[int, int]] = {}
    inside: dict[str, set[str]] = {}
    for item in ordering.items:
        for depth, cluster in enumerate(item.path):
            low, high = span.get(cluster, (item.rank, item.rank))
            span[cluster] = (min(low, item.rank), max(high, item.rank))
            inside.setdefault(cluster, set()).update(item.path[depth + 1 :])
    reach: dict[str, Point] = {}
    for cluster in reversed(ordering.clusters):  # inner first
        inner = sorted(inside[cluster])
        above = [reach[c][0] for c in inner if span[c][0] == span[cluster][0]]
        below = [reach[c][1] for c in inner if span[c][1] == span[cluster][1]]
        reach[cluster] = (
            PAD + CLUSTER_LABEL + max(above, default=0.0),
            PAD + max(below, default=0.0),
        )
    return span, reach


def _vertical(ordering: Ordering, sizes: Sizes) -> tuple[list[float], list[Point]]:
    """The top of every layer's band, and the free part of every gap (where labels go)."""
    span, reach = _cluster_reach(ordering)
    count = len(ordering.layers)
    above, below = [0.0] * count, [0.0] * count
    for cluster, (first, last) in span.items():
        above[first] = max(above[first], reach[cluster][0])
        below[last] = max(below[last], reach[cluster][1])
    labelled = {
        _label_gap(ordering, edge)
        for edge, size in enumerate(sizes.labels)
        if size is not None and ordering.chains[edge]
    }
    rows, free = [], []
    y = above[0] if count else 0.0
    for layer in range(count):
        rows.append(y)
        y += sizes.height + below[layer]
        if layer + 1 < count:
            end = y + GAP + (LABEL_GAP if layer in labelled else 0.0)
            free.append((y, end))
            y = end + above[layer + 1]
    return rows, free


def _label_gap(ordering: Ordering, edge: int) -> int:
    """The gap an edge's label sits in: the first one its route crosses."""
    chain = ordering.chains[edge]
    start = ordering.items[chain[-1] if ordering.back[edge] else chain[0]].rank
    return start - 1 if ordering.back[edge] else start


def _cluster_boxes(
    ordering: Ordering, x: list[float], rows: list[float], height: float
) -> list[tuple[str, Rect]]:
    span, reach = _cluster_reach(ordering)
    count = len(ordering.items)
    boxes = []
    for n, cluster in enumerate(ordering.clusters):
        left, right = x[count + 2 * n], x[count + 2 * n + 1]
        top = rows[span[cluster][0]] - reach[cluster][0]
        bottom = rows[span[cluster][1]] + height + reach[cluster][1]
        boxes.append((cluster, Rect(left, top, right - left, bottom - top)))
    return boxes


def _routes(
    ordering: Ordering, x: list[float], rows: list[float], height: float, boxes: Mapping[str, Rect]
) -> list[Route]:
    offsets = _parallel_offsets(ordering, boxes)
    self_loops = loops(ordering)
    routes = []
    for edge, chain in enumerate(ordering.chains):
        if not chain:
            node, n = self_loops[edge]
            routes.append(_loop(boxes[node], n))
            continue
        upper, lower = (boxes[_name(ordering, chain[0])], boxes[_name(ordering, chain[-1])])
        through: list[Point] = []
        for i in chain[1:-1]:
            top = rows[ordering.items[i].rank]
            through += [(x[i], top), (x[i], top + height)]
        shift = offsets.get(edge, 0.0)
        start, end = (upper.cx + shift, upper.cy), (lower.cx + shift, lower.cy)
        first = _border(upper, start, through[0] if through else end)
        last = _border(lower, end, through[-1] if through else start)
        points = (first, *through, last)
        back = ordering.back[edge]
        routes.append(Route(points[::-1] if back else points, back=back))
    return routes


def _name(ordering: Ordering, item: int) -> str:
    node = ordering.items[item].node
    assert node is not None  # a chain starts and ends at nodes
    return node


def _parallel_offsets(ordering: Ordering, boxes: Mapping[str, Rect]) -> dict[int, float]:
    """Edges joining the same two nodes in adjacent layers, spread side by side."""
    groups: dict[tuple[int, int], list[int]] = {}
    for edge, chain in enumerate(ordering.chains):
        if len(chain) == 2:
            groups.setdefault((chain[0], chain[1]), []).append(edge)
    offsets = {}
    for (upper, lower), edges in groups.items():
        narrow = min(boxes[_name(ordering, upper)].w, boxes[_name(ordering, lower)].w)
        step = min(PARALLEL, (narrow / 2 - 6) * 2 / max(len(edges) - 1, 1))
        for k, edge in enumerate(edges):
            offsets[edge] = (k - (len(edges) - 1) / 2) * step
    return offsets


def _border(box: Rect, inside: Point, toward: Point) -> Point:
    """Where the line from ``inside`` (a point in ``box``) towards ``toward`` (in another
    layer) crosses the box's bottom or top side, kept off the rounded corners. Always on
    that side, so the route's next segment stays in the gap between the layers."""
    y = box.y + box.h if toward[1] > inside[1] else box.y
    dy = toward[1] - inside[1]
    x = inside[0] + (toward[0] - inside[0]) * (y - inside[1]) / dy if dy else inside[0]
    corner = min(box.h / 2, box.w / 4)
    return (min(max(x, box.x + corner), box.x + box.w - corner), y)


def _loop(box: Rect, n: int) -> Route:
    right, top, bottom = box.x + box.w, box.y + box.h * 0.25, box.y + box.h * 0.75
    reach = right + LOOP + n * LOOP_STEP
    return Route(
        ((right, top), (reach, top - 10), (reach, bottom + 10), (right, bottom)), loop=True
    )


def _labels(
    ordering: Ordering,
    routes: list[Route],
    sizes: Sizes,
    free: list[Point],
    boxes: Mapping[str, Rect],
) -> list[Rect | None]:
    """Each label on its route in the middle of the first gap the route crosses (beside
    the loop for a self-loop); labels of one gap pushed apart left to right."""
    labels: list[Rect | None] = [None] * len(routes)
    by_gap: dict[int, list[tuple[float, int]]] = {}
    beside = loop_room(ordering, sizes)  # where a node's next loop label goes
    self_loops = loops(ordering)
    for edge, size in enumerate(sizes.labels):
        if size is None:
            continue
        route = routes[edge]
        if route.loop:
            node = self_loops[edge][0]
            box = boxes[node]
            labels[edge] = Rect(box.x + box.w + beside[node], box.cy - size[1] / 2, *size)
            beside[node] += size[0] + 6
            continue
        gap = _label_gap(ordering, edge)
        y = sum(free[gap]) / 2
        by_gap.setdefault(gap, []).append((_x_at(route.points, y), edge))
    for gap, placed in by_gap.items():
        y = sum(free[gap]) / 2
        right = -math.inf
        for x, edge in sorted(placed):
            w, h = sizes.labels[edge] or (0.0, 0.0)
            left = max(x - w / 2, right + 6)
            labels[edge] = Rect(left, y - h / 2, w, h)
            right = left + w
    return labels


def _x_at(points: Sequence[Point], y: float) -> float:
    """Where a route that goes straight up or down is at height ``y``."""
    for (x0, y0), (x1, y1) in pairwise(points):
        if min(y0, y1) <= y <= max(y0, y1) and y0 != y1:
            return x0 + (x1 - x0) * (y - y0) / (y1 - y0)
    return points[0][0]


def _framed(
    boxes: dict[str, Rect],
    clusters: list[tuple[str, Rect]],
    routes: list[Route],
    labels: list[Rect | None],
) -> Layout:
    """Everything moved so the drawing starts at ``MARGIN`` from the top left."""
    rects = [*boxes.values(), *(box for _, box in clusters), *(r for r in labels if r)]
    points = [p for route in routes for p in route.points]
    xs = [r.x for r in rects] + [p[0] for p in points]
    ys = [r.y for r in rects] + [p[1] for p in points]
    xe = [r.x + r.w for r in rects] + [p[0] for p in points]
    ye = [r.y + r.h for r in rects] + [p[1] for p in points]
    dx, dy = MARGIN - min(xs, default=0.0), MARGIN - min(ys, default=0.0)
    return Layout(
        width=max(xe, default=0.0) + dx + MARGIN,
        height=max(ye, default=0.0) + dy + MARGIN,
        boxes={node: box.moved(dx, dy) for node, box in boxes.items()},
        clusters=[(name, box.moved(dx, dy)) for name, box in clusters],
        routes=[
            Route(tuple((px + dx, py + dy) for px, py in r.points), r.back, r.loop) for r in routes
        ],
        labels=[label.moved(dx, dy) if label else None for label in labels],
    )
