"""One checkpoint: its state (a collapsible JSON tree, messages as a chat), what changed
since its parent or any chosen checkpoint (``threads.diff_values``, as ``statekeeper
diff``), its pending writes per task, its metadata, and, with ``--write``, a form to
fork from it with edited state.

A checkpoint that cannot be read (damaged, or written with another serializer) is not a
crash: the error page shows the damage record (``CorruptCheckpointError.damage``). When
only the checkpoint compared against is unreadable, the page shows the state and says
why the diff is missing.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

from langgraph.checkpoint.base import CheckpointTuple

from statekeeper._storage.serde import skeleton_reader
from statekeeper.errors import ConfigurationError, StatekeeperError
from statekeeper.threads import diff_values, pending_nodes
from statekeeper.ui.pages_threads import interrupt_values
from statekeeper.ui.render import Page
from statekeeper.ui.values import as_chat, channel_change, dumps, plain, size_of, split_channels

if TYPE_CHECKING:
    from starlette.requests import Request

    from statekeeper.ui.app import Form, Inspector

__all__ = ["checkpoint", "nodes_that_ran", "pending_writes"]

_ERROR = "__error__"
_INTERRUPT = "__interrupt__"


def _parent_id(tup: CheckpointTuple) -> str | None:
    parent = tup.parent_config
    return parent["configurable"].get("checkpoint_id") if parent is not None else None


def pending_writes(tup: CheckpointTuple) -> list[dict[str, Any]]:
    """The pending writes of ``tup`` per task, in stored order, each write flagged
    ``"error"`` (a node raised), ``"interrupt"`` (an ``interrupt()`` waits) or
    ``"write"``."""
    tasks: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for task_id, channel, value in tup.pending_writes or ():
        kind = {_ERROR: "error", _INTERRUPT: "interrupt"}.get(channel, "write")
        tasks[task_id].append({"channel": channel, "kind": kind, "value": plain(value)})
    return [
        {
            "task_id": task_id,
            "writes": writes,
            "failed": any(w["kind"] == "error" for w in writes),
            "interrupted": any(w["kind"] == "interrupt" for w in writes),
        }
        for task_id, writes in tasks.items()
    ]


def _base(
    inspector: Inspector, tup: CheckpointTuple, against: str | None
) -> tuple[CheckpointTuple | None, str | None]:
    """The checkpoint to compare ``tup`` with (``against``, else its parent), or why
    there is none to show."""
    configurable = tup.config["configurable"]
    try:
        if against:
            return inspector.checkpoint(
                configurable["thread_id"], configurable.get("checkpoint_ns", ""), against
            ), None
        if tup.parent_config is None:
            return None, None
        return inspector.saver.get_tuple(tup.parent_config), None
    except StatekeeperError as exc:
        return None, f"cannot compare with {against or 'the parent'}: {type(exc).__name__}: {exc}"


def nodes_that_ran(
    inspector: Inspector, tup: CheckpointTuple, parent: CheckpointTuple | None = None
) -> list[str]:
    """The nodes that ran to make ``tup``: those its parent had next (for a loop step;
    an input, a fork or an update ran nothing). ``parent`` when already loaded. A parent
    that cannot be read (damaged) ran nothing that can be shown: ``[]``."""
    if tup.parent_config is None or (tup.metadata or {}).get("source") != "loop":
        return []
    try:
        parent = parent or inspector.saver.get_tuple(tup.parent_config)
    except StatekeeperError:  # the checkpoint page's diff says why
        return []
    return list(pending_nodes(parent.checkpoint)) if parent is not None else []


def checkpoint(inspector: Inspector, request: Request, form: Form) -> Page:
    """The checkpoint ``?thread=&ns=&id=`` (default: the newest), compared with
    ``?against=`` (default: its parent)."""
    params = request.query_params
    thread_id = params.get("thread")
    if thread_id is None:
        raise ConfigurationError("which thread? pass ?thread=ID (and &id=CHECKPOINT)")
    ns = params.get("ns", "")
    tup = inspector.checkpoint(thread_id, ns, params.get("id") or None)
    state, internal = split_channels(tup.checkpoint["channel_values"])
    base, diff_error = _base(inspector, tup, params.get("against") or None)
    old_state = split_channels(base.checkpoint["channel_values"])[0] if base is not None else {}
    changes = [channel_change(change, old_state) for change in diff_values(old_state, state)]
    metadata = dict(tup.metadata or {})
    graph_ref = inspector.options.graph_ref or metadata.get("statekeeper_graph")
    # the newest checkpoint here, for a link to it: its id is all that is needed
    newest = skeleton_reader(inspector.saver).get_tuple(
        {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}
    )
    data = {
        "thread_id": thread_id,
        "checkpoint_ns": ns,
        "checkpoint_id": tup.checkpoint["id"],
        "parent_id": _parent_id(tup),
        "head_id": newest.checkpoint["id"] if newest is not None else None,
        "ts": tup.checkpoint["ts"],
        "metadata": plain(metadata),
        "next": list(pending_nodes(tup.checkpoint)),
        "ran": nodes_that_ran(inspector, tup, base if params.get("against") is None else None),
        "interrupts": interrupt_values(tup),
        "state": plain(state),
        "channels": plain(internal),
        "pending_writes": pending_writes(tup),
        "diff": {
            "against": base.checkpoint["id"] if base is not None else None,
            "error": diff_error,
            "changes": changes,
        },
        "graph": graph_ref if isinstance(graph_ref, str) else None,
    }
    context = {
        "is_head": newest is not None and newest.checkpoint["id"] == tup.checkpoint["id"],
        "chats": {name: chat for name, value in state.items() if (chat := as_chat(value))},
        "sizes": {name: size_of(value) for name, value in state.items()},
        "state_json": dumps(state) if inspector.write else "",
    }
    title = f"Checkpoint {tup.checkpoint['id']}"
    return Page("checkpoint.html", data, context=context, title=title)
