"""The offline graph drawing (``statekeeper.graphs.drawing``): what the SVG holds, that it
is inert whatever the node names, the layout's geometry on real and random graphs, and
the Mermaid and text renderings."""

from __future__ import annotations

import itertools
import operator
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.runnables.graph import Edge, Graph, Node
from langgraph.graph import END, START, StateGraph
from langgraph.types import Send

from statekeeper.graphs import load_graph
from statekeeper.graphs.drawing import describe, render_ascii, render_mermaid, render_svg

ROOT = Path(__file__).resolve().parents[2]
SVG = "{http://www.w3.org/2000/svg}"


# -- graphs ------------------------------------------------------------------------------


class S(TypedDict):
    x: Annotated[list[int], operator.add]


def _step(state: S) -> dict[str, Any]:
    return {"x": [1]}


def approval() -> Graph:
    return load_graph("examples.approval_agent:graph").get_graph()


def with_subgraph(xray: int = 1) -> Graph:
    """``pre -> child -> post``; ``child`` is ``a -> (go: b | stop: end)``."""
    child = StateGraph(S)
    child.add_node("a", _step)
    child.add_node("b", _step)
    child.add_edge(START, "a")
    child.add_conditional_edges("a", lambda s: "b", {"go": "b", "stop": END})
    child.add_edge("b", END)
    parent = StateGraph(S)
    parent.add_node("pre", _step)
    parent.add_node("child", child.compile())
    parent.add_node("post", _step)
    parent.add_edge(START, "pre")
    parent.add_edge("pre", "child")
    parent.add_edge("child", "post")
    parent.add_edge("post", END)
    return parent.compile().get_graph(xray=xray)


def fan_out() -> Graph:
    """``plan`` sends one ``work`` task per item (``Send``), then ``join``."""
    builder = StateGraph(S)
    builder.add_node("plan", _step)
    builder.add_node("work", _step)
    builder.add_node("join", _step)
    builder.add_edge(START, "plan")
    builder.add_conditional_edges(
        "plan", lambda s: [Send("work", {"x": [i]}) for i in range(3)], ["work"]
    )
    builder.add_edge("work", "join")
    builder.add_edge("join", END)
    return builder.compile().get_graph()


def nested() -> Graph:
    """Two subgraphs side by side, one holding another, loops back and a self-loop."""
    inner = StateGraph(S)
    inner.add_node("i1", _step)
    inner.add_node("i2", _step)
    inner.add_edge(START, "i1")
    inner.add_edge("i1", "i2")
    inner.add_edge("i2", END)
    mid = StateGraph(S)
    mid.add_node("m1", _step)
    mid.add_node("deep", inner.compile())
    mid.add_node("m2", _step)
    mid.add_edge(START, "m1")
    mid.add_edge("m1", "deep")
    mid.add_edge("deep", "m2")
    mid.add_conditional_edges("m2", lambda s: END, {"again": "m1", "done": END})
    side = StateGraph(S)
    side.add_node("o1", _step)
    side.add_node("o2", _step)
    side.add_edge(START, "o1")
    side.add_edge("o1", "o2")
    side.add_edge("o2", END)
    top = StateGraph(S)
    for name, node in [("router", _step), ("left", mid.compile()), ("right", side.compile())]:
        top.add_node(name, node)
    top.add_node("merge", _step)
    top.add_node("loopy", _step)
    top.add_edge(START, "router")
    top.add_edge("router", "left")
    top.add_edge("router", "right")
    top.add_edge("left", "merge")
    top.add_edge("right", "merge")
    top.add_conditional_edges(
        "merge", lambda s: END, {"retry": "router", "self": "loopy", "finish": END}
    )
    top.add_conditional_edges("loopy", lambda s: END, {"again": "loopy", "out": END})
    return top.compile().get_graph(xray=True)


def plain(nodes: list[str], edges: list[tuple[str, str, str | None, bool]]) -> Graph:
    """A drawable graph built directly: node ids (an xray id's name is its last part),
    and edges as ``(source, target, label, conditional)``."""
    graph = Graph()
    for node in nodes:
        graph.nodes[node] = Node(node, node.rpartition(":")[2], None, None)
    graph.edges.extend(Edge(s, t, label, conditional) for s, t, label, conditional in edges)
    return graph


EXAMPLES = {"approval": approval, "subgraph": with_subgraph, "fan-out": fan_out, "nested": nested}


# -- reading an SVG back -----------------------------------------------------------------


@dataclass(frozen=True)
class Box:
    x: float
    y: float
    w: float
    h: float

    def overlaps(self, other: Box, margin: float = 0.0) -> bool:
        return (
            self.x < other.x + other.w - margin
            and other.x < self.x + self.w - margin
            and self.y < other.y + other.h - margin
            and other.y < self.y + self.h - margin
        )

    def holds(self, other: Box) -> bool:
        return (
            self.x <= other.x
            and self.y <= other.y
            and other.x + other.w <= self.x + self.w
            and other.y + other.h <= self.y + self.h
        )


@dataclass(frozen=True)
class Drawn:
    root: ET.Element
    nodes: dict[str, ET.Element]  # by data-node
    boxes: dict[str, Box]
    edges: list[tuple[ET.Element, list[tuple[float, float]], set[str]]]
    clusters: dict[str, Box]
    labels: list[Box]


def _box(rect: ET.Element) -> Box:
    return Box(*(float(rect.attrib[k]) for k in ("x", "y", "width", "height")))


def _classes(element: ET.Element) -> set[str]:
    return set(element.attrib.get("class", "").split())


def _groups(root: ET.Element, kind: str) -> list[ET.Element]:
    return [g for g in root.iter(f"{SVG}g") if kind in _classes(g)]


def parse(svg: str) -> Drawn:
    root = ET.fromstring(svg)
    nodes = {g.attrib["data-node"]: g for g in _groups(root, "node")}
    assert len(nodes) == len(_groups(root, "node")), "two nodes with one data-node"
    edges = []
    labels = []
    for g in _groups(root, "edge"):
        d = g.find(f"{SVG}path")
        assert d is not None
        points = [
            (float(x), float(y)) for x, y in re.findall(r"(-?[\d.]+),(-?[\d.]+)", d.attrib["d"])
        ]
        edges.append((g, points, _classes(g)))
        labels += [_box(r) for r in g.iter(f"{SVG}rect")]
    return Drawn(
        root=root,
        nodes=nodes,
        boxes={name: _box(g.find(f"{SVG}rect")) for name, g in nodes.items()},  # type: ignore[arg-type]
        edges=edges,
        clusters={
            g.attrib["data-cluster"]: _box(g.find(f"{SVG}rect"))  # type: ignore[arg-type]
            for g in _groups(root, "cluster")
        },
        labels=labels,
    )


def _text(element: ET.Element, tag: str) -> str:
    found = element.find(f"{SVG}{tag}")
    assert found is not None
    assert found.text is not None
    return found.text


# -- the geometry every drawing has ------------------------------------------------------


def _crosses(a: tuple[float, float], b: tuple[float, float], box: Box) -> bool:
    """Whether the segment ``a``-``b`` enters the inside of ``box`` (Liang-Barsky)."""
    low, high = 0.0, 1.0
    dx, dy = b[0] - a[0], b[1] - a[1]
    inner = Box(box.x + 0.5, box.y + 0.5, box.w - 1, box.h - 1)
    for p, q in (
        (-dx, a[0] - inner.x),
        (dx, inner.x + inner.w - a[0]),
        (-dy, a[1] - inner.y),
        (dy, inner.y + inner.h - a[1]),
    ):
        if p == 0:
            if q < 0:
                return False
        elif p < 0:
            low = max(low, q / p)
        else:
            high = min(high, q / p)
    return low < high


def check_geometry(graph: Graph, drawn: Drawn) -> None:
    """What every drawing keeps: one group per node and per edge; boxes apart; every edge
    that is not a back edge going down (back edges up); no route through a box; labels
    off the boxes and off each other; subgraph boxes holding exactly their nodes."""
    assert set(drawn.boxes) == set(graph.nodes)
    drawn_edges = Counter(
        (g.attrib["data-source"], g.attrib["data-target"]) for g, _, _ in drawn.edges
    )
    assert drawn_edges == Counter((e.source, e.target) for e in graph.edges)
    boxes = list(drawn.boxes.items())
    for n, (a, box_a) in enumerate(boxes):
        for b, box_b in boxes[n + 1 :]:
            assert not box_a.overlaps(box_b), (a, b)
    _check_routes(drawn)
    for n, label in enumerate(drawn.labels):
        assert not any(label.overlaps(box) for box in drawn.boxes.values())
        assert not any(label.overlaps(other, 0.5) for other in drawn.labels[n + 1 :])
    _check_clusters(drawn)


def _check_routes(drawn: Drawn) -> None:
    for g, points, classes in drawn.edges:
        if "loop" in classes:
            assert g.attrib["data-source"] == g.attrib["data-target"]
            continue
        steps = list(itertools.pairwise(y for _, y in points))
        if "back" in classes:
            assert all(y1 < y0 for y0, y1 in steps), g.attrib
        else:
            assert all(y1 > y0 for y0, y1 in steps), g.attrib
        for a, b in itertools.pairwise(points):
            assert not any(_crosses(a, b, box) for box in drawn.boxes.values()), g.attrib


def _check_clusters(drawn: Drawn) -> None:
    for cluster, outline in drawn.clusters.items():
        for node, box in drawn.boxes.items():
            if node.startswith(cluster + ":"):
                assert outline.holds(box), (cluster, node)
            else:
                assert not outline.overlaps(box), (cluster, node)
        for other, around in drawn.clusters.items():
            if other.startswith(cluster + ":"):
                assert outline.holds(around), (cluster, other)
            elif other != cluster and not cluster.startswith(other + ":"):
                assert not outline.overlaps(around), (cluster, other)


@pytest.mark.parametrize("make", EXAMPLES.values(), ids=EXAMPLES.keys())
def test_the_layout_keeps_its_geometry(make: Any) -> None:
    graph = make()
    check_geometry(graph, parse(render_svg(graph)))


_IDS = st.sampled_from(["", "c:", "d:", "c:e:"])


@st.composite
def random_graphs(draw: st.DrawFn) -> Graph:
    count = draw(st.integers(1, 10))
    nodes = [f"{draw(_IDS)}n{i}" for i in range(count)]
    edges = [(START, nodes[0], None, False)]
    for _ in range(draw(st.integers(0, 18))):
        source = draw(st.sampled_from(nodes))
        target = draw(st.sampled_from([*nodes, END]))
        label = draw(st.sampled_from([None, None, "go", "a rather long label"]))
        edges.append((source, target, label, draw(st.booleans())))
    return plain([START, *nodes, END], edges)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_graphs())
def test_random_graphs_keep_the_geometry_and_draw_the_same_twice(graph: Graph) -> None:
    svg = render_svg(graph)
    check_geometry(graph, parse(svg))
    assert render_svg(graph) == svg


def test_back_edges_are_exactly_those_that_close_a_cycle() -> None:
    data = describe(approval())
    assert [(e["source"], e["target"]) for e in data["edges"] if e["back"]] == [("tools", "agent")]
    assert data["layers"] == [["__start__"], ["agent"], ["approve", "tools"], ["send"], ["__end__"]]
    graph = plain(["a", "b"], [("a", "b", None, False), ("b", "a", None, False)])
    assert [e["back"] for e in describe(graph)["edges"]] == [False, True]


def test_parallel_and_self_loop_edges_each_get_their_own_route() -> None:
    graph = plain(
        [START, "a", "b", END],
        [
            (START, "a", None, False),
            ("a", "b", "x", True),
            ("a", "b", "y", True),
            ("b", "b", "again", True),
            ("b", "b", "more", True),
            ("b", END, None, False),
        ],
    )
    drawn = parse(render_svg(graph))
    check_geometry(graph, drawn)
    routes = [tuple(points) for _, points, _ in drawn.edges]
    assert len(set(routes)) == len(routes)
    loops = [g for g, _, classes in drawn.edges if "loop" in classes]
    assert [_text(g, "text") for g in loops] == ["again", "more"]


def test_the_empty_graph_is_an_empty_picture() -> None:
    root = ET.fromstring(render_svg(Graph()))
    assert not _groups(root, "node")
    assert render_mermaid(Graph()).startswith("flowchart TD\n")


# -- what the SVG holds --------------------------------------------------------------------


def test_every_node_is_an_addressable_group_and_every_edge_is_drawn() -> None:
    graph = approval()
    drawn = parse(render_svg(graph))
    assert {name: g.attrib["id"] for name, g in drawn.nodes.items()} == {
        name: f"sk-node-{name}" for name in graph.nodes
    }
    assert _classes(drawn.nodes["__start__"]) == {"node", "terminal", "start"}
    assert _classes(drawn.nodes["agent"]) == {"node"}
    assert len(drawn.edges) == len(graph.edges) == 6
    for g, _, classes in drawn.edges:
        edge = next(
            e
            for e in graph.edges
            if (e.source, e.target) == (g.attrib["data-source"], g.attrib["data-target"])
        )
        path = g.find(f"{SVG}path")
        assert path is not None
        assert ("conditional" in classes) == edge.conditional
        assert ("stroke-dasharray" in path.attrib) == edge.conditional
        assert path.attrib["marker-end"] == "url(#sk-graph-arrow)"
    assert drawn.root.find(f"{SVG}defs/{SVG}marker[@id='sk-graph-arrow']") is not None


def test_a_subgraph_is_a_box_around_its_nodes_with_its_name() -> None:
    drawn = parse(render_svg(with_subgraph()))
    assert set(drawn.clusters) == {"child"}
    (cluster,) = _groups(drawn.root, "cluster")
    assert cluster.attrib["id"] == "sk-cluster-child"
    assert _text(cluster, "text") == "child"
    assert _text(drawn.nodes["child:a"], "text") == "a"  # the name; the id is the title
    assert _text(drawn.nodes["child:a"], "title") == "child:a"
    assert drawn.nodes["child:a"].attrib["id"].startswith("sk-node-child_a-")
    labels = {
        g.attrib["data-target"]: _text(g, "text") for g, _, c in drawn.edges if "conditional" in c
    }
    assert labels == {"child:b": "go", "child:__end__": "stop"}


def test_current_and_next_nodes_are_marked_and_explained_by_a_legend() -> None:
    graph = approval()
    drawn = parse(render_svg(graph, current={"agent"}, next=["tools", "not-a-node"]))
    marked = {name: _classes(g) & {"current", "next"} for name, g in drawn.nodes.items()}
    assert marked == {
        "__start__": set(),
        "agent": {"current"},
        "tools": {"next"},
        "approve": set(),
        "send": set(),
        "__end__": set(),
    }
    fills = {name: g.find(f"{SVG}rect").attrib["fill"] for name, g in drawn.nodes.items()}  # type: ignore[union-attr]
    assert len({fills["agent"], fills["tools"], fills["approve"]}) == 3
    (legend,) = _groups(drawn.root, "legend")
    assert [_text(g, "text") for g in legend.findall(f"{SVG}g")] == ["current", "next"]
    # one string is one name; without marks there is no legend
    assert _classes(parse(render_svg(graph, next="tools")).nodes["tools"]) == {"node", "next"}
    assert not _groups(parse(render_svg(graph)).root, "legend")


def test_marking_a_subgraph_marks_its_box() -> None:
    drawn = parse(render_svg(with_subgraph(), current={"child"}, next={"child:b"}))
    (cluster,) = _groups(drawn.root, "cluster")
    assert "current" in _classes(cluster)
    assert "next" in _classes(drawn.nodes["child:b"])


def test_boxes_fit_their_names_and_long_names_are_cut_with_the_full_name_as_title() -> None:
    long = "summarize_the_conversation_so_far_and_store_it"
    wide = "要約ノード"  # five characters, ten columns
    drawn = parse(render_svg(plain([START, long, wide], [(START, long, None, False)])))
    shown = _text(drawn.nodes[long], "text")
    assert shown.endswith("…")
    assert long.startswith(shown[:-1])
    assert len(shown) == 28
    assert _text(drawn.nodes[long], "title") == long
    assert drawn.boxes[long].w >= 28 * 0.6 * 13
    assert _text(drawn.nodes[wide], "text") == wide
    assert drawn.boxes[wide].w >= 10 * 0.6 * 13


HOSTILE = [
    "<script>alert(1)</script>",
    '" onmouseover="alert(1)',
    "it's & <b>bold</b>",
    "\u202eexe.txt",  # right-to-left override: would show as "txt.exe"
    "tab\there\nnew\x00line\x1b[31m",
    "zero\u200bwidth\u2066isolate\ufeff",
    "lone\ud800surrogate",
]


def _hostile_graph() -> Graph:
    nodes = [START, *HOSTILE, END]
    edges = [(START, HOSTILE[0], None, False)]
    edges += [(a, b, b, True) for a, b in itertools.pairwise(HOSTILE)]
    edges.append((HOSTILE[-1], END, "</text><script>alert(2)</script>", False))
    return plain(nodes, edges)


def test_the_svg_is_inert_and_self_contained() -> None:
    for svg in (render_svg(_hostile_graph(), current={HOSTILE[0]}), render_svg(nested())):
        root = ET.fromstring(svg)
        for element in root.iter():
            tag = element.tag.removeprefix(SVG)
            assert tag in {"svg", "title", "defs", "marker", "path", "rect", "g", "text"}, tag
            for name, value in element.attrib.items():
                assert not name.lower().startswith("on"), name
                assert name not in {"style", "href", "{http://www.w3.org/1999/xlink}href"}, name
                assert "url(" not in value or value == "url(#sk-graph-arrow)", value
                assert "javascript:" not in value.lower()


def test_hostile_names_are_shown_as_text_never_as_markup_or_controls() -> None:
    graph = _hostile_graph()
    svg = render_svg(graph)
    drawn = parse(svg)
    assert not any(ch in svg for ch in "\u202e\u200b\u2066\ufeff\x00\x1b\t")
    assert "<script" not in svg
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in svg
    shown = {_text(g, "title"): _text(g, "text") for g in drawn.nodes.values()}
    assert shown["<script>alert(1)</script>"] == "<script>alert(1)</script>"
    assert shown["\\u202eexe.txt"] == "\\u202eexe.txt"
    assert shown["tab\\x09here\\x0anew\\x00line\\x1b[31m"].startswith("tab\\x09here\\x0a")
    assert "lone\\ud800surrogate" in shown
    assert set(drawn.nodes) >= {'" onmouseover="alert(1)', "it's & <b>bold</b>"}
    ids = [g.attrib["id"] for g in drawn.nodes.values()]
    assert len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"[A-Za-z0-9_.-]+", i) for i in ids)
    labels = [_text(g, "text") for g, _, _ in drawn.edges if g.find(f"{SVG}text") is not None]
    assert "</text><script>alert(2)…" in labels
    for text in (render_mermaid(graph), render_ascii(graph)):
        assert not any(ch in text for ch in "\u202e\u200b\u2066\ufeff\x00\x1b\t")
        text.encode("utf-8")  # no lone surrogate left
    mermaid = render_mermaid(graph)
    assert '("#60;script#62;alert(1)#60;/script#62;")' in mermaid
    assert '"#34; onmouseover=#34;alert(1)"' in mermaid
    assert "<" not in mermaid
    assert "&" not in mermaid


def test_the_same_graph_gives_the_same_bytes_in_another_process() -> None:
    """Nothing depends on hash order or on what ran before."""
    code = (
        "import sys\n"
        "from tests.graphs.test_drawing import nested\n"
        "from statekeeper.graphs.drawing import render_svg\n"
        "sys.stdout.write(render_svg(nested(), current={'left:m1'}, next={'right'}))\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT, env=env
    )
    assert done.stdout == render_svg(nested(), current={"left:m1"}, next={"right"})


# -- Mermaid and text ----------------------------------------------------------------------


def test_mermaid_of_a_subgraph_with_labelled_conditional_edges() -> None:
    assert render_mermaid(with_subgraph()) == (
        "flowchart TD\n"
        '    n0(["__start__"]):::first\n'
        '    n1("pre")\n'
        '    n2("post")\n'
        '    n3(["__end__"]):::last\n'
        '    subgraph s0["child"]\n'
        '        n4("a")\n'
        '        n5("b")\n'
        '        n6(["__end__"]):::last\n'
        "    end\n"
        "    n0 --> n1\n"
        "    n6 --> n2\n"
        "    n1 --> n4\n"
        "    n2 --> n3\n"
        '    n4 -.->|"stop"| n6\n'
        '    n4 -.->|"go"| n5\n'
        "    n5 --> n6\n"
        "    classDef first fill-opacity:0\n"
        "    classDef last fill:#bfb6fc\n"
    )


def test_mermaid_of_a_send_fan_out_and_of_nested_subgraphs() -> None:
    assert render_mermaid(fan_out()) == (
        "flowchart TD\n"
        '    n0(["__start__"]):::first\n'
        '    n1("plan")\n'
        '    n2("work")\n'
        '    n3("join")\n'
        '    n4(["__end__"]):::last\n'
        "    n0 --> n1\n"
        "    n1 -.-> n2\n"
        "    n2 --> n3\n"
        "    n3 --> n4\n"
        "    classDef first fill-opacity:0\n"
        "    classDef last fill:#bfb6fc\n"
    )
    blocks = [
        line.strip()
        for line in render_mermaid(nested()).splitlines()
        if "subgraph" in line or line.strip() == "end"
    ]
    assert blocks == [
        'subgraph s0["left"]',
        'subgraph s1["deep"]',
        "end",
        "end",
        'subgraph s2["right"]',
        "end",
    ]


def test_text_lists_the_layers_with_the_edges_leaving_them() -> None:
    assert render_ascii(approval()) == (
        "0  (__start__)\n"
        "     __start__ --> agent\n"
        "1  [agent]\n"
        "     agent ..> approve\n"
        "     agent ..> tools\n"
        "2  [approve]  [tools]\n"
        "     approve --> send\n"
        "     tools --> agent  (up)\n"
        "3  [send]\n"
        "     send --> __end__\n"
        "4  (__end__)\n"
        "\n"
        "--> edge   ..> conditional edge   (up) back to an earlier layer\n"
    )
    text = render_ascii(with_subgraph())
    assert '     child:a ..> child:b  "go"\n' in text


def test_describe_gives_the_drawing_as_data() -> None:
    data = describe(with_subgraph())
    assert data["layers"][2] == ["child:a"]
    assert {n["id"]: (n["name"], n["layer"], n["subgraphs"]) for n in data["nodes"]}["child:b"] == (
        "b",
        3,
        ["child"],
    )
    assert {
        "source": "child:a",
        "target": "child:b",
        "conditional": True,
        "label": "go",
        "back": False,
    } in data["edges"]


def _segments_cross(
    a: tuple[float, float], b: tuple[float, float], c: tuple[float, float], d: tuple[float, float]
) -> bool:
    def side(p: tuple[float, float], q: tuple[float, float], r: tuple[float, float]) -> float:
        return (q[0] - p[0]) * (r[1] - p[1]) - (q[1] - p[1]) * (r[0] - p[0])

    return side(a, b, c) * side(a, b, d) < 0 and side(c, d, a) * side(c, d, b) < 0


def crossings(drawn: Drawn) -> int:
    """How many pairs of edges without a common node cross in the drawing."""
    routes = [
        ({g.attrib["data-source"], g.attrib["data-target"]}, list(itertools.pairwise(points)))
        for g, points, classes in drawn.edges
        if "loop" not in classes
    ]
    return sum(
        1
        for n, (ends_a, segments_a) in enumerate(routes)
        for ends_b, segments_b in routes[n + 1 :]
        if not ends_a & ends_b
        and any(_segments_cross(*sa, *sb) for sa in segments_a for sb in segments_b)
    )


def test_the_order_within_layers_removes_crossings() -> None:
    """``start`` reaches ``b4..b1`` first, so they start in that order; each ``a_i`` leads
    to ``b_i``: the sweeps must untangle both into a drawing without a crossing."""
    bs, as_ = [f"b{i}" for i in range(1, 5)], [f"a{i}" for i in range(1, 5)]
    edges = [(START, b, None, False) for b in reversed(bs)]
    edges += [(START, a, None, False) for a in as_]
    edges += [(a, b, None, False) for a, b in zip(as_, bs, strict=True)]
    graph = plain([START, *as_, *bs], edges)
    assert crossings(parse(render_svg(graph))) == 0
    for make in (approval, with_subgraph, fan_out):
        assert crossings(parse(render_svg(make()))) == 0
