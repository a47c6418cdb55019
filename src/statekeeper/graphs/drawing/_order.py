"""Layers and the order within them, for drawing a graph (the first steps of a Sugiyama
layout). Pure and deterministic: the same graph gives the same result.

1. Cycles are broken by the back edges of a depth-first search from ``__start__`` (then
   from every node not reached, in graph order, each node's edges in graph order).
2. Every node's layer is its longest path from a source over the other edges, so every
   other edge goes down at least one layer; ``__end__`` goes to the bottom layer.
3. An edge spanning several layers becomes a chain of dummy items, one per layer crossed,
   so its route is laid out like the nodes and passes between them. A subgraph (the
   ``child`` of xray ids ``child:a``) gets a filler item in every layer it spans where it
   has nothing else, so its box is one block in each of its layers.
4. A few barycenter sweeps reorder the layers, keeping the order with the fewest
   crossings. A subgraph's items stay contiguous in every layer, and sibling subgraphs
   keep one left-to-right order in all layers (sorted by one key per sweep), so their
   boxes can be drawn without overlapping.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import pairwise

START, END = "__start__", "__end__"
SWEEPS = 8  # alternating down and up; the best order seen is kept
# how strongly an edge segment pulls its ends into line: long edges should stay straight
_WEIGHT = {0: 1.0, 1: 2.0, 2: 8.0}  # by the number of dummy ends

Neighbours = list[list[tuple[int, float]]]


@dataclass(frozen=True)
class Spec:
    """What the layout needs of a graph: node ids in graph order, edges as ``(source,
    target)`` pairs of those ids in graph order, and for each node in a subgraph the ids
    of its enclosing subgraphs, outermost first."""

    nodes: tuple[str, ...]
    edges: tuple[tuple[str, str], ...]
    paths: Mapping[str, tuple[str, ...]]


@dataclass(frozen=True)
class Item:
    """One slot of a layer: a node (``node`` set), a dummy of a long edge (``edge``
    set) or a subgraph's filler (neither). ``path``: the subgraphs it is drawn inside."""

    rank: int
    path: tuple[str, ...]
    node: str | None = None
    edge: int | None = None


@dataclass(frozen=True)
class Ordering:
    """Layers top to bottom, each a left-to-right list of item indices. ``chains[e]`` are
    edge ``e``'s items from its upper end to its lower end (empty for a self-loop);
    ``back[e]`` says the edge goes up. ``up``/``down``: each item's neighbours in the
    layer above/below, with weights. ``clusters``: subgraph ids, outer before inner.
    ``edges``: the spec's edges."""

    edges: tuple[tuple[str, str], ...]
    rank: dict[str, int]
    items: list[Item]
    layers: list[list[int]]
    chains: list[tuple[int, ...]]
    back: list[bool]
    up: Neighbours
    down: Neighbours
    clusters: list[str]

    def nodes(self, layer: int) -> list[str]:
        """The node ids of ``layer``, left to right."""
        return [node for i in self.layers[layer] if (node := self.items[i].node) is not None]


def order(spec: Spec) -> Ordering:
    """Rank, chain and order ``spec``: see the module docstring."""
    found, back = _search(spec)
    rank = _ranks(spec, back)
    items, chains = _chains(spec, rank, back)
    clusters = _fill(items)
    up, down = _neighbours(items, chains)
    cluster_index = {cluster: i for i, cluster in enumerate(clusters)}
    layers = _initial(items, found, spec, rank, cluster_index)
    best, fewest = [list(layer) for layer in layers], _crossings(layers, down)
    for sweep in range(SWEEPS):
        if fewest == 0:
            break
        _sweep(layers, items, (up, down), downward=sweep % 2 == 0, cluster_index=cluster_index)
        crossings = _crossings(layers, down)
        if crossings < fewest:
            best, fewest = [list(layer) for layer in layers], crossings
    return Ordering(spec.edges, rank, items, best, chains, back, up, down, clusters)


def _search(spec: Spec) -> tuple[dict[str, int], list[bool]]:
    """Depth-first search: each node's discovery index, and which edges are back edges
    (to a node still on the search stack). Iterative, so deep graphs cannot overflow."""
    out: dict[str, list[tuple[int, str]]] = {node: [] for node in spec.nodes}
    for index, (source, target) in enumerate(spec.edges):
        out[source].append((index, target))
    back = [False] * len(spec.edges)
    on_stack: dict[str, bool] = {}
    found: dict[str, int] = {}
    for root in ([START] if START in out else []) + list(spec.nodes):
        if root in found:
            continue
        found[root], on_stack[root] = len(found), True
        stack = [(root, iter(out[root]))]
        while stack:
            node, todo = stack[-1]
            step = next(todo, None)
            if step is None:
                on_stack[node] = False
                stack.pop()
                continue
            index, target = step
            if target == node:
                continue  # a self-loop takes no part in the layering
            if on_stack.get(target):
                back[index] = True
            elif target not in found:
                found[target], on_stack[target] = len(found), True
                stack.append((target, iter(out[target])))
    return found, back


def _ranks(spec: Spec, back: list[bool]) -> dict[str, int]:
    position = {node: i for i, node in enumerate(spec.nodes)}
    after: dict[str, list[str]] = {node: [] for node in spec.nodes}
    waiting = dict.fromkeys(spec.nodes, 0)
    for index, (source, target) in enumerate(spec.edges):
        if source != target and not back[index]:
            after[source].append(target)
            waiting[target] += 1
    ready = [(position[node], node) for node in spec.nodes if waiting[node] == 0]
    heapq.heapify(ready)
    rank = dict.fromkeys(spec.nodes, 0)
    while ready:
        _, node = heapq.heappop(ready)
        for target in after[node]:
            rank[target] = max(rank[target], rank[node] + 1)
            waiting[target] -= 1
            if waiting[target] == 0:
                heapq.heappush(ready, (position[target], target))
    if END in rank and not any(source == END for source, _ in spec.edges):
        rank[END] = max([rank[END], *(r + 1 for node, r in rank.items() if node != END)])
    return rank


def _chains(
    spec: Spec, rank: dict[str, int], back: list[bool]
) -> tuple[list[Item], list[tuple[int, ...]]]:
    items = [Item(rank[node], spec.paths.get(node, ()), node=node) for node in spec.nodes]
    index = {node: i for i, node in enumerate(spec.nodes)}
    chains: list[tuple[int, ...]] = []
    for edge, (source, target) in enumerate(spec.edges):
        if source == target:
            chains.append(())
            continue
        upper, lower = (
            (index[target], index[source]) if back[edge] else (index[source], index[target])
        )
        path = _common(items[upper].path, items[lower].path)
        chain = [upper]
        for layer in range(items[upper].rank + 1, items[lower].rank):
            chain.append(len(items))
            items.append(Item(layer, path, edge=edge))
        chains.append((*chain, lower))
    return items, chains


def _common(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[str, ...]:
    shared = 0
    while shared < min(len(a), len(b)) and a[shared] == b[shared]:
        shared += 1
    return a[:shared]


def _fill(items: list[Item]) -> list[str]:
    """Add a filler to every layer a subgraph spans but has no item in (inner subgraphs
    first: their fillers count for the subgraphs around them); return every subgraph,
    outer before inner, each level in order of first appearance."""
    paths: dict[str, tuple[str, ...]] = {}
    for item in items:
        for depth, cluster in enumerate(item.path):
            paths.setdefault(cluster, item.path[: depth + 1])
    clusters = sorted(paths, key=lambda cluster: len(paths[cluster]))  # stable: appearance
    for cluster in reversed(clusters):
        layers = {item.rank for item in items if cluster in item.path}
        items.extend(
            Item(layer, paths[cluster])
            for layer in range(min(layers), max(layers) + 1)
            if layer not in layers
        )
    return clusters


def _neighbours(items: list[Item], chains: list[tuple[int, ...]]) -> tuple[Neighbours, Neighbours]:
    up: Neighbours = [[] for _ in items]
    down: Neighbours = [[] for _ in items]
    for chain in chains:
        for upper, lower in pairwise(chain):
            weight = _WEIGHT[(items[upper].node is None) + (items[lower].node is None)]
            down[upper].append((lower, weight))
            up[lower].append((upper, weight))
    return up, down


def _initial(
    items: list[Item],
    found: dict[str, int],
    spec: Spec,
    rank: dict[str, int],
    cluster_index: Mapping[str, int],
) -> list[list[int]]:
    """Layers in the order of the depth-first search (an edge's dummies between its
    ends, a filler at the middle of its subgraph)."""
    key: dict[int, float] = {}
    for i, item in enumerate(items):
        if item.node is not None:
            key[i] = float(found[item.node])
        elif item.edge is not None:
            source, target = spec.edges[item.edge]
            key[i] = (found[source] + found[target]) / 2
    for i, item in enumerate(items):
        if i not in key:
            around = [key[j] for j in key if item.path[-1] in items[j].path]
            key[i] = sum(around) / len(around)
    layers: list[list[int]] = [[] for _ in range(max(rank.values(), default=-1) + 1)]
    for i, item in enumerate(items):
        layers[item.rank].append(i)
    group_key = _group_keys(items, key)
    return [_arrange(layer, items, key, group_key, cluster_index) for layer in layers]


def _group_keys(items: list[Item], key: Mapping[int, float]) -> dict[str, float]:
    """One key per subgraph: the mean key of its items, in every layer."""
    sums: dict[str, list[float]] = {}
    for i, value in key.items():
        for cluster in items[i].path:
            sums.setdefault(cluster, []).append(value)
    return {cluster: sum(values) / len(values) for cluster, values in sums.items()}


def _arrange(
    layer: list[int],
    items: list[Item],
    key: Mapping[int, float],
    group_key: Mapping[str, float],
    cluster_index: Mapping[str, int],
    depth: int = 0,
) -> list[int]:
    """``layer`` sorted by ``key``, each subgraph as one block sorted by its group key
    (ties: current position for items, a fixed index for subgraphs), inside recursively."""
    entries: list[tuple[tuple[float, int, int], list[int]]] = []
    groups: dict[str, list[int]] = {}
    for position, i in enumerate(layer):
        path = items[i].path
        if len(path) > depth:
            groups.setdefault(path[depth], []).append(i)
        else:
            entries.append(((key[i], 0, position), [i]))
    for cluster, members in groups.items():
        inner = _arrange(members, items, key, group_key, cluster_index, depth + 1)
        entries.append(((group_key[cluster], 1, cluster_index[cluster]), inner))
    entries.sort(key=lambda entry: entry[0])
    return [i for _, block in entries for i in block]


def _barycenter(
    neighbours: list[tuple[int, float]], position: Mapping[int, int], default: float
) -> float:
    placed = [(position[j], weight) for j, weight in neighbours if j in position]
    if not placed:
        return default
    return sum(p * w for p, w in placed) / sum(w for _, w in placed)


def _sweep(
    layers: list[list[int]],
    items: list[Item],
    neighbours: tuple[Neighbours, Neighbours],
    *,
    downward: bool,
    cluster_index: Mapping[str, int],
) -> None:
    """Reorder each layer by the barycenter of its neighbours in the layer before it
    (the first layer keeps its items' order, only its subgraph blocks are resorted), with
    one key per subgraph for the whole sweep: the mean two-sided barycenter of its items."""
    up, down = neighbours
    everywhere = {i: p for layer in layers for p, i in enumerate(layer)}
    two_sided = {
        i: _barycenter(up[i] + down[i], everywhere, everywhere[i]) for i in range(len(items))
    }
    group_key = _group_keys(items, two_sided)
    fixed = up if downward else down
    position: dict[int, int] = {}
    for row in range(len(layers)) if downward else reversed(range(len(layers))):
        key = {i: _barycenter(fixed[i], position, p) for p, i in enumerate(layers[row])}
        layers[row] = _arrange(layers[row], items, key, group_key, cluster_index)
        position = {i: p for p, i in enumerate(layers[row])}


def _crossings(layers: list[list[int]], down: Neighbours) -> int:
    """How many pairs of segments between adjacent layers cross: for each segment, the
    earlier-starting ones that end further right (counted with a Fenwick tree)."""
    total = 0
    for upper, lower in pairwise(layers):
        position = {i: p for p, i in enumerate(lower)}
        segments = sorted((p, position[j]) for p, i in enumerate(upper) for j, _ in down[i])
        tree = [0] * (len(lower) + 1)
        start = 0
        while start < len(segments):
            stop = start
            while stop < len(segments) and segments[stop][0] == segments[start][0]:
                stop += 1
            group = segments[start:stop]  # same upper end: they do not cross each other
            for _, end in group:
                total += start - _count_upto(tree, end + 1)  # earlier ones ending right of it
            for _, end in group:
                _add(tree, end + 1)
            start = stop
    return total


def _add(tree: list[int], index: int) -> None:
    while index < len(tree):
        tree[index] += 1
        index += index & -index


def _count_upto(tree: list[int], index: int) -> int:
    total = 0
    while index > 0:
        total += tree[index]
        index -= index & -index
    return total
