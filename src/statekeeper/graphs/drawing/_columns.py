"""Horizontal positions for an ordered graph, by difference constraints.

Every constraint is ``x[b] >= x[a] + d``: neighbours in a layer keep their order and their
distance, a subgraph's box (two variables: its left and right side) holds its items with
a padding, and what is beside a subgraph in one of its layers stays outside its box. The
constraints have no cycle because sibling subgraphs keep one order in every layer (see
``_order``). Two extreme solutions (everything packed left, everything packed right) are
averaged, which keeps every constraint (they are linear); then each item in turn moves
towards its neighbours in the next layer as far as its constraints allow, which keeps
them too, and the dummies of each long edge are lined up where they all may go.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise

from statekeeper.graphs.drawing._order import Ordering

NODE_SEP = 28.0  # between two boxes of a layer
DUMMY_SEP = 14.0  # beside an edge passing through a layer
PAD = 12.0  # inside a subgraph box
LOOP = 26.0  # how far a self-loop reaches out of its box
LOOP_STEP = 8.0  # further for each more self-loop of the same node
PASSES = 8  # of moving items towards their neighbours

Point = tuple[float, float]


@dataclass(frozen=True)
class Sizes:
    """What the layout measures: each node's box width, the one box height, each edge's
    label size (``None``: no label) and each subgraph's name width."""

    widths: Mapping[str, float]
    height: float
    labels: Sequence[tuple[float, float] | None]
    clusters: Mapping[str, float]


@dataclass
class _Constraints:
    """``x[b] >= x[a] + d`` for each ``(a, b, d)``, indexed both ways."""

    size: int
    before: list[list[tuple[int, float]]] = field(default_factory=list)
    after: list[list[tuple[int, float]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.before = [[] for _ in range(self.size)]
        self.after = [[] for _ in range(self.size)]

    def add(self, a: int, b: int, d: float) -> None:
        self.after[a].append((b, d))
        self.before[b].append((a, d))

    def low(self, v: int, x: list[float]) -> float:
        return max((x[a] + d for a, d in self.before[v]), default=-math.inf)

    def high(self, v: int, x: list[float]) -> float:
        return min((x[b] - d for b, d in self.after[v]), default=math.inf)

    def packed(self, *, left: bool) -> list[float]:
        """The solution with every variable as far left (or right) as it can be."""
        edges, into = (self.after, self.before) if left else (self.before, self.after)
        waiting = [len(into[v]) for v in range(self.size)]
        ready = [v for v in range(self.size) if waiting[v] == 0]
        x = [0.0] * self.size
        done = 0
        while ready:
            v = ready.pop()
            done += 1
            for w, d in edges[v]:
                x[w] = max(x[w], x[v] + d)
                waiting[w] -= 1
                if waiting[w] == 0:
                    ready.append(w)
        if done != self.size:  # the ordering keeps sibling subgraphs in one order
            raise RuntimeError("graph layout: contradictory horizontal constraints")
        return x if left else [-value for value in x]


def loops(ordering: Ordering) -> dict[int, tuple[str, int]]:
    """Each self-loop's node and its number among that node's loops."""
    found: dict[int, tuple[str, int]] = {}
    count: dict[str, int] = {}
    for edge, (source, target) in enumerate(ordering.edges):
        if source == target:
            found[edge] = (source, count.get(source, 0))
            count[source] = found[edge][1] + 1
    return found


def loop_room(ordering: Ordering, sizes: Sizes) -> dict[str, float]:
    """How far right of its box a node's self-loops reach (the first loop label's left)."""
    room: dict[str, float] = {}
    for node, n in loops(ordering).values():
        room[node] = LOOP + n * LOOP_STEP + 6
    return room


def _loop_labels(ordering: Ordering, sizes: Sizes) -> dict[str, float]:
    """How far right of its box a node's self-loops and their labels (side by side) reach."""
    room = loop_room(ordering, sizes)
    for edge, (node, _) in loops(ordering).items():
        label = sizes.labels[edge]
        room[node] += label[0] + 6 if label else 0.0
    return room


def _extents(ordering: Ordering, sizes: Sizes) -> list[Point]:
    """How far each item reaches left and right of its centre."""
    loops = _loop_labels(ordering, sizes)
    reach = []
    for item in ordering.items:
        half = sizes.widths[item.node] / 2 if item.node is not None else 0.0
        reach.append((half, half + (loops.get(item.node, 0.0) if item.node else 0.0)))
    return reach


def horizontal(ordering: Ordering, sizes: Sizes) -> list[float]:
    """The centre of every item, then the left and right side of every subgraph's box
    (subgraph ``n`` of ``ordering.clusters`` at ``len(items) + 2n`` and the next index)."""
    count = len(ordering.items)
    bounds = {c: (count + 2 * n, count + 2 * n + 1) for n, c in enumerate(ordering.clusters)}
    constraints = _Constraints(count + 2 * len(bounds))
    reach = _extents(ordering, sizes)
    for layer in ordering.layers:
        _block(layer, 0, ordering, reach, bounds, constraints)
    for cluster, (left, right) in bounds.items():
        constraints.add(left, right, sizes.clusters[cluster] + 2 * PAD)
    packed_left, packed_right = constraints.packed(left=True), constraints.packed(left=False)
    shift = max(packed_left, default=0.0) - max(packed_right, default=0.0)
    x = [(a + b + shift) / 2 for a, b in zip(packed_left, packed_right, strict=True)]
    outer_first = [bounds[c] for c in ordering.clusters]
    for n in range(PASSES + 1):
        for left, right in outer_first:  # let subgraph boxes give way...
            x[left] = max(constraints.low(left, x), x[left] - 1e4)
            x[right] = min(constraints.high(right, x), x[right] + 1e4)
        _pull(ordering, x, constraints, n)
        _straighten(ordering, x, constraints)
        for left, right in reversed(outer_first):  # ...and close them around their items
            x[left] = constraints.high(left, x)
            x[right] = constraints.low(right, x)
    return x


def _block(
    layer: list[int],
    depth: int,
    ordering: Ordering,
    reach: list[Point],
    bounds: Mapping[str, tuple[int, int]],
    constraints: _Constraints,
) -> tuple[tuple[int, float], tuple[int, float]]:
    """Constrain the items of one layer that share the subgraphs of ``depth`` levels
    (subgraph blocks of the next level nested inside); return the left and right end of
    the block as ``(variable, offset)``."""
    ends: list[tuple[tuple[int, float], tuple[int, float], bool]] = []
    start = 0
    while start < len(layer):
        path = ordering.items[layer[start]].path
        if len(path) <= depth:
            i = layer[start]
            ends.append(((i, -reach[i][0]), (i, reach[i][1]), ordering.items[i].node is not None))
            start += 1
            continue
        stop = start
        while stop < len(layer) and ordering.items[layer[stop]].path[depth : depth + 1] == (
            path[depth],
        ):
            stop += 1
        left, right = bounds[path[depth]]
        first, last = _block(layer[start:stop], depth + 1, ordering, reach, bounds, constraints)
        _separate(constraints, (left, 0.0), first, PAD)
        _separate(constraints, last, (right, 0.0), PAD)
        ends.append(((left, 0.0), (right, 0.0), True))
        start = stop
    for (_, a, solid_a), (b, _, solid_b) in pairwise(ends):
        _separate(constraints, a, b, NODE_SEP if solid_a and solid_b else DUMMY_SEP)
    return ends[0][0], ends[-1][1]


def _separate(
    constraints: _Constraints, a: tuple[int, float], b: tuple[int, float], gap: float
) -> None:
    """Point ``b`` at least ``gap`` right of point ``a`` (each a variable plus offset)."""
    constraints.add(a[0], b[0], a[1] - b[1] + gap)


def _pull(ordering: Ordering, x: list[float], constraints: _Constraints, n: int) -> None:
    """Move each item towards the weighted mean of its neighbours in the layer before it
    (down on even passes, up on odd ones, both on the last), as far as allowed."""
    downward = n % 2 == 0
    rows = ordering.layers if downward else list(reversed(ordering.layers))
    for layer in rows:
        for i in layer:
            ahead, behind = (ordering.up[i], ordering.down[i])
            if not downward:
                ahead, behind = behind, ahead
            pulls = ahead + behind if n == PASSES else ahead or behind
            if not pulls:
                continue
            want = sum(x[j] * w for j, w in pulls) / sum(w for _, w in pulls)
            x[i] = min(max(want, constraints.low(i, x)), constraints.high(i, x))


def _straighten(ordering: Ordering, x: list[float], constraints: _Constraints) -> None:
    """Put all dummies of a long edge on one vertical line where each of them may go
    (they are in different layers, so one's room does not depend on another's)."""
    for chain in ordering.chains:
        dummies = chain[1:-1]
        if len(dummies) < 2:
            continue
        low = max(constraints.low(i, x) for i in dummies)
        high = min(constraints.high(i, x) for i in dummies)
        if low <= high:
            middle = sorted(x[i] for i in dummies)[len(dummies) // 2]
            for i in dummies:
                x[i] = min(max(middle, low), high)
