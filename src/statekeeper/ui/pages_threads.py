"""The threads list and a thread's checkpoint tree.

The list pages through ``threads.page_threads`` (the backend's thread index: a page
costs what it shows, whatever the number of threads) and describes each thread with
``threads.thread_summary``, the classification the
CLI's ``statekeeper threads`` prints; a thread whose newest checkpoint cannot be read
is listed with the error instead of failing the page.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from statekeeper._storage.serde import skeleton_reader
from statekeeper.checkpointers.base import Checkpointer
from statekeeper.errors import ConfigurationError, StatekeeperError, ThreadNotFoundError
from statekeeper.refs import readable_checkpoints
from statekeeper.threads import (
    STATUSES,
    ThreadSummary,
    claim_holder,
    interrupts,
    page_threads,
    summarize,
    thread_summary,
)
from statekeeper.ui.render import Page
from statekeeper.ui.tree import build_tree
from statekeeper.ui.values import plain

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig
    from starlette.requests import Request

    from statekeeper.ui.app import Form, Inspector

__all__ = ["DONE", "Row", "failures", "interrupt_values", "parse_metadata", "thread", "threads"]

PAGE_SIZE = 50
MAX_PAGE_SIZE = 500
DONE = ("answered", "resumed", "forked")  # what an action did, as a thread's page says it
_ERROR = "__error__"  # the channel of a task's error write (LangGraph's ERROR)
_FORKED_FROM_THREAD = "statekeeper_forked_from_thread"  # the runner's fork metadata
_FORKED_FROM = "statekeeper_forked_from"


@dataclass(frozen=True)
class Row:
    """One line of the threads list: the summary, or why there is none."""

    thread_id: str
    summary: ThreadSummary | None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        if self.summary is None:
            return {"thread_id": self.thread_id, "status": "unreadable", "error": self.error}
        return {**plain(self.summary), "error": None}


def parse_metadata(text: str) -> dict[str, Any]:
    """The metadata search ``key=value key2=value2``: each value is JSON when it parses
    (``step=3``, ``flag=true``), else text.

    Raises:
        ConfigurationError: a term has no ``=``.
    """
    found: dict[str, Any] = {}
    for term in text.split():
        key, sep, raw = term.partition("=")
        if not sep or not key:
            raise ConfigurationError(
                f"metadata search terms are key=value, got {term!r} (e.g. source=loop step=3)"
            )
        try:
            found[key] = json.loads(raw)
        except ValueError:
            found[key] = raw
    return found


def _limit(text: str) -> int:
    """``?limit=``: ASCII digits from 1 to :data:`MAX_PAGE_SIZE` (default :data:`PAGE_SIZE`).

    Raises:
        ConfigurationError: anything else.
    """
    if not text:
        return PAGE_SIZE
    # isdigit alone takes '²', which int() refuses, and int() takes '١' and '５'
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= MAX_PAGE_SIZE:
        raise ConfigurationError(f"limit must be a number from 1 to {MAX_PAGE_SIZE}, got {text!r}")
    return int(text)


def _row(inspector: Inspector, thread_id: str) -> Row:
    try:
        summary = thread_summary(inspector.saver, thread_id)  # "running" when claimed
    except StatekeeperError as exc:
        return Row(thread_id, None, f"{type(exc).__name__}: {exc}")
    if summary is None:  # only subgraph checkpoints, or deleted since it was listed
        return Row(thread_id, None, "no checkpoint in the root namespace")
    return Row(thread_id, summary)


def threads(inspector: Inspector, request: Request, form: Form) -> Page:
    """Threads, most recently written first, a page at a time; ``q`` searches ids,
    ``meta`` metadata (``key=value``), ``status`` keeps one status, ``cursor`` opens the
    next page."""
    params = request.query_params
    match = params.get("q", "").strip()
    meta_text = params.get("meta", "").strip()
    status = params.get("status", "").strip()
    if status and status not in STATUSES:
        raise ConfigurationError(f"unknown status {status!r}; use one of {', '.join(STATUSES)}")
    page = page_threads(
        inspector.saver,
        limit=_limit(params.get("limit", "")),
        cursor=params.get("cursor") or None,
        match=match or None,
        metadata=parse_metadata(meta_text) or None,
        status=status or None,
    )
    rows = [_row(inspector, thread_id) for thread_id in page.thread_ids]
    data = {
        "threads": [row.to_json() for row in rows],
        "cursor": page.cursor,
        "q": match,
        "meta": meta_text,
        "status": status,
    }
    context = {"rows": rows, "statuses": STATUSES, "chosen": status}
    return Page("threads.html", data, context=context, title="Threads")


def thread(inspector: Inspector, request: Request, form: Form) -> Page:
    """A thread: its head, and every checkpoint of every namespace as a tree; a damaged
    checkpoint is left out of the tree and named beside it, so the rest still shows."""
    params = request.query_params
    thread_id = params.get("thread")
    if thread_id is None:
        raise ConfigurationError("which thread? pass ?thread=ID")
    config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
    # the tree needs ids, parents, metadata and what runs next, not the values' objects
    listed, damaged = readable_checkpoints(skeleton_reader(inspector.saver), config)
    if not listed:
        if damaged:
            raise damaged[0]
        raise ThreadNotFoundError(f"no thread {thread_id!r}; the threads page lists them")
    namespaces = build_tree(listed)
    root = [t for t in listed if t.config["configurable"].get("checkpoint_ns", "") == ""]
    head = max(root, key=lambda t: t.checkpoint["id"]) if root else None
    if head is not None:  # read whole: what its interrupts ask may be any object
        head = inspector.saver.get_tuple(head.config) or head
    # the fork that made this thread: the checkpoint it wrote names the source (those the
    # runs after it wrote do not), and is the newest that does (a copied history may hold
    # older forks' too)
    forks = [t for t in root if t.metadata.get(_FORKED_FROM_THREAD) is not None]
    fork = max(forks, key=lambda t: t.checkpoint["id"]).metadata if forks else {}
    data = {
        "thread_id": thread_id,
        "summary": (
            summarize(head, holder=claim_holder(inspector.saver, thread_id))
            if head is not None
            else None
        ),
        "interrupts": interrupt_values(head) if head is not None else [],
        "failures": failures(inspector.saver, head) if head is not None else [],
        # what the action that led here did, and the page it was sent from
        "did": params.get("did") if params.get("did") in DONE else None,
        "back": "interrupts" if params.get("back") == "interrupts" else None,
        "forked_from_thread": fork.get(_FORKED_FROM_THREAD),
        "forked_from_checkpoint": fork.get(_FORKED_FROM),
        "namespaces": [ns.to_json() for ns in namespaces],
        # left out of the tree, each with what `statekeeper verify` reports for it
        "damaged": [dataclasses.asdict(exc.damage) for exc in damaged],
    }
    return Page("thread.html", data, context={"trees": namespaces}, title=f"Thread {thread_id}")


def failures(saver: Any, tup: Any) -> list[dict[str, Any]]:
    """What the tasks of ``tup``'s step raised, as LangGraph stored it (the error's
    ``repr``), each with its node when the checkpointer keeps the task's path
    (statekeeper's do; ``None`` otherwise)."""
    writes = tup.pending_writes or ()
    errors = [(task, value) for task, channel, value in writes if channel == _ERROR]
    if not errors:
        return []
    paths: dict[str, str] = {}
    # the node is a nicety: the error itself is what matters, so a failed read is none
    with contextlib.suppress(StatekeeperError, NotImplementedError):
        if isinstance(saver, Checkpointer):
            paths = {w.task_id: w.task_path for w in saver.get_writes(tup.config)}
    return [
        {
            "task_id": task_id,
            "node": _pulled_node(paths.get(task_id, "")),
            "error": value if isinstance(value, str) else plain(value),
        }
        for task_id, value in errors
    ]


def _pulled_node(path: str) -> str | None:
    """The node of a task path ``"~__pregel_pull, NODE"`` (a node its trigger ran);
    ``None`` for a ``Send`` task or an unknown path."""
    prefix = "~__pregel_pull, "
    return path[len(prefix) :] if path.startswith(prefix) else None


def interrupt_values(tup: Any) -> list[dict[str, Any]]:
    """The interrupts waiting at ``tup`` as ``{"id", "value"}`` (plain JSON)."""
    return [
        {"id": getattr(found, "id", None), "value": plain(getattr(found, "value", found))}
        for found in interrupts(tup)
    ]
