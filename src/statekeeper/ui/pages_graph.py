"""The graph, drawn offline, with the nodes that just ran and those that run next lit.

The graph is ``--graph`` when given, else the one the selected checkpoint's metadata
names (``statekeeper_graph``, recorded by the runner). A page only imports what the user
named: ``--graph`` is imported at start, and a graph named by stored data is drawn only
when its module is already imported (by ``--graph``, or by a resume or fork the user
asked for); otherwise the page says how to draw it. Loading a module runs its code, and
a record is data that anyone who could write to the storage chose. The reference is
never taken from the query string either.

The picture comes from :func:`draw`, the one call into the offline renderer; the
page also lists the nodes and edges as text, for reading and for assistive technology.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from statekeeper.graphs.drawing import render_svg
from statekeeper.threads import pending_nodes
from statekeeper.ui.pages_checkpoint import nodes_that_ran
from statekeeper.ui.render import Page

if TYPE_CHECKING:
    from starlette.requests import Request

    from statekeeper.ui.app import Form, Inspector

__all__ = ["draw", "graph"]


def draw(graph: Any, current: Sequence[str], next: Sequence[str]) -> str:
    """The compiled ``graph`` as an SVG document (text) with ``current`` and ``next`` lit,
    from :func:`statekeeper.graphs.drawing.render_svg`: every name in it is escaped, and
    it holds no script and no style the page's CSP would block."""
    return render_svg(graph.get_graph(), current=tuple(current), next=tuple(next))


def _structure(graph: Any) -> tuple[list[str], list[dict[str, Any]]]:
    drawn = graph.get_graph()
    nodes = [str(node_id) for node_id in drawn.nodes]
    edges = [
        {"source": edge.source, "target": edge.target, "conditional": bool(edge.conditional)}
        for edge in drawn.edges
    ]
    return nodes, edges


def graph(inspector: Inspector, request: Request, form: Form) -> Page:
    """The graph of ``--graph`` or of ``?thread=`` (at checkpoint ``&id=``, default the
    newest), with the nodes that ran to make that checkpoint and the next ones lit."""
    params = request.query_params
    thread_id = params.get("thread")
    ref = inspector.options.graph_ref
    current: tuple[str, ...] = ()
    upcoming: tuple[str, ...] = ()
    checkpoint_id = named = None
    if thread_id is not None:
        tup = inspector.checkpoint(thread_id, "", params.get("id") or None)
        checkpoint_id = tup.checkpoint["id"]
        upcoming = pending_nodes(tup.checkpoint)
        current = tuple(nodes_that_ran(inspector, tup))
        stored = (tup.metadata or {}).get("statekeeper_graph")
        named = stored if isinstance(stored, str) else None
        ref = ref or named
    stored_only = ref is not None and ref != inspector.options.graph_ref and not _imported(ref)
    data: dict[str, Any] = {
        "ref": ref,
        "named": named,  # the graph the checkpoint names, when it is not the one drawn
        "missing": [],  # nodes that ran or run next, which the drawn graph lacks
        # how to draw a graph the page may not import (only for that case)
        "command": shlex.join(
            ["statekeeper", "ui", "--db", inspector.options.label or "URL", "--graph", ref]
        )
        if stored_only and ref is not None
        else None,
        "not_imported": stored_only,
        "thread_id": thread_id,
        "checkpoint_id": checkpoint_id,
        "current": list(current),
        "next": list(upcoming),
        "nodes": [],
        "edges": [],
        "svg": None,
    }
    if ref is not None and not stored_only:
        from statekeeper.graphs import load_graph

        loaded = load_graph(ref)
        data["nodes"], data["edges"] = _structure(loaded)
        data["svg"] = draw(loaded, current, upcoming)
        data["missing"] = [n for n in dict.fromkeys(current + upcoming) if n not in data["nodes"]]
    if named == ref:
        data["named"] = None
    return Page("graph.html", data, title=f"Graph {ref or ''}".strip())


def _imported(ref: str) -> bool:
    """Whether the module of ``ref`` (``"package.module:attr"``) is already imported, so
    that loading the graph imports nothing (malformed references are not: loading them
    says why)."""
    module, _, attr = ref.partition(":")
    return bool(module and attr) and module in sys.modules
