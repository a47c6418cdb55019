"""Memory: namespaces, their notes with provenance and validity, supersede chains, and
the ``memory stats`` figures as small charts.

Only reads (``list_namespaces``, ``search``, ``get``, :func:`memory_stats`,
:func:`supersede_chain`): the pages never write to the store. Values that are not notes
(or notes this version cannot read) are shown as stored, with the reason.

The charts are laid out here (:func:`memory_charts`) and drawn as inline SVG by the
templates (``templates/macros.html``), so every label is escaped like any other text and
no chart library is needed: one bar per time window (``memory_stats(..., window=...)``),
oldest first; a window without a value (no recall in it) gets no bar, so a gap never
reads as zero.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from langgraph.store.base import BaseStore, InvalidNamespaceError, Item
from starlette.exceptions import HTTPException

from statekeeper.errors import ConfigurationError, InvalidIdError, SerializationError
from statekeeper.ui.render import Page
from statekeeper.ui.values import plain

if TYPE_CHECKING:
    from starlette.requests import Request

    from statekeeper.ui.app import Form, Inspector

__all__ = ["Bar", "Chart", "memory", "memory_charts", "note", "notes"]

PAGE_SIZE = 50
_MAX_NAMESPACES = 1000
_LOG = ("statekeeper", "log")


def _store(inspector: Inspector) -> BaseStore:
    store = inspector.store()
    if store is None:
        raise ConfigurationError("no memory store: start the inspector with --store URL")
    return store


def memory(inspector: Inspector, request: Request, form: Form) -> Page:
    """The store's namespaces (notes first, the event log apart) and its stats."""
    from statekeeper.memory.metrics import memory_stats

    store = _store(inspector)
    namespaces = store.list_namespaces(limit=_MAX_NAMESPACES)
    stats = memory_stats(store)
    data = {
        "namespaces": [list(ns) for ns in namespaces if ns[: len(_LOG)] != _LOG],
        "log_namespaces": [list(ns) for ns in namespaces if ns[: len(_LOG)] == _LOG],
        "stats": stats.to_json(),
    }
    context = {"charts": memory_charts(stats.windows)}
    return Page("memory.html", data, context=context, title="Memory")


def _shown(item: Item, now: datetime.datetime) -> dict[str, Any]:
    """An item as listed: the note (with whether it holds now) or the raw value."""
    from statekeeper.memory.notes import NOTE_KIND, Note

    shown: dict[str, Any] = {
        "namespace": list(item.namespace),
        "key": item.key,
        "updated_at": item.updated_at.isoformat(),
        "note": None,
        "holds_now": None,
        "value": None,
        "error": None,
    }
    value = item.value
    if isinstance(value, dict) and value.get("kind") == NOTE_KIND:
        try:
            parsed = Note.from_value(value)
        except SerializationError as exc:
            shown["error"] = str(exc)
        else:
            shown["note"] = parsed.model_dump(mode="json")
            shown["holds_now"] = parsed.superseded_by is None and parsed.valid_at(now)
            return shown
    shown["value"] = plain(value)
    return shown


def _namespace(request: Request) -> tuple[str, ...]:
    return tuple(part for part in request.query_params.getlist("ns") if part)


@contextmanager
def _reading(namespace: tuple[str, ...]) -> Iterator[None]:
    """Read the store under ``namespace``, as the query gave it.

    Raises:
        InvalidIdError: the store refuses ``namespace`` (a 400, as for any bad id).
    """
    try:
        yield
    except InvalidNamespaceError:
        # LangGraph's own error (a label holding '.' or NUL) is no StatekeeperError: the
        # app would answer 500, with a message that may hold the raw NUL
        raise InvalidIdError(
            f"no namespace can be {list(namespace)!r}: "
            "a namespace label is any text without '.' or NUL"
        ) from None


def _offset(text: str) -> int:
    """``?offset=``: ASCII digits (default 0).

    Raises:
        ConfigurationError: anything else.
    """
    if not text:
        return 0
    # isdigit alone takes '²', which int() refuses, and int() takes '١' and '５'
    if not (text.isascii() and text.isdigit()):
        raise ConfigurationError(f"offset must be a number, got {text!r}")
    return int(text)


def notes(inspector: Inspector, request: Request, form: Form) -> Page:
    """The items under namespace ``?ns=a&ns=b`` (and deeper), a page at a time."""
    store = _store(inspector)
    namespace = _namespace(request)
    offset = _offset(request.query_params.get("offset", ""))
    with _reading(namespace):
        page = store.search(namespace, limit=PAGE_SIZE + 1, offset=offset)
    now = datetime.datetime.now(datetime.UTC)
    data = {
        "namespace": list(namespace),
        "items": [_shown(item, now) for item in page[:PAGE_SIZE]],
        "offset": offset,
        "next_offset": offset + PAGE_SIZE if len(page) > PAGE_SIZE else None,
    }
    return Page("notes.html", data, title="Notes in " + "/".join(namespace))


def note(inspector: Inspector, request: Request, form: Form) -> Page:
    """One item ``?ns=...&key=`` and, for a note, its supersede chain."""
    from statekeeper.memory.conflicts import supersede_chain

    store = _store(inspector)
    namespace = _namespace(request)
    key = request.query_params.get("key", "")
    with _reading(namespace):
        item = store.get(namespace, key)
    if item is None:
        raise HTTPException(404, f"no item {key!r} in namespace {'/'.join(namespace)!r}")
    shown = _shown(item, datetime.datetime.now(datetime.UTC))
    chain = supersede_chain(store, namespace, key) if shown["note"] is not None else []
    data = {
        **shown,
        "supersede_chain": [{"key": n.key, **n.model_dump(mode="json")} for n in chain],
    }
    return Page("note.html", data, title=f"Note {key}")


# -- charts ------------------------------------------------------------------------------

WIDTH = 320
HEIGHT = 96
_LABEL = 14  # room under the bars for the first and last window's date
_TOP = 12  # room above them for the value of the full height


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    label: str  # the window and its value, shown as the bar's tooltip


@dataclass(frozen=True)
class Chart:
    title: str
    bars: list[Bar]
    top: str  # the value the full height stands for
    first: str  # the first and last window
    last: str
    width: int = WIDTH
    height: int = HEIGHT

    @property
    def plot_height(self) -> int:
        """Where the bars stand: the baseline's y."""
        return self.height - _LABEL


def chart(
    title: str,
    windows: Sequence[tuple[str, float | None]],
    *,
    top: float | None = None,
    shown: Callable[[float], str] = lambda value: f"{value:g}",
) -> Chart:
    """Bars for ``windows`` (``(label, value)``, oldest first) scaled to ``top`` (default:
    the largest value)."""
    values = [value for _, value in windows if value is not None]
    scale = top if top is not None else max(values, default=0.0)
    plot = HEIGHT - _LABEL - _TOP
    slot = WIDTH / max(len(windows), 1)
    bars = []
    for index, (label, value) in enumerate(windows):
        if value is None:
            continue
        height = plot * (value / scale) if scale > 0 else 0.0
        height = max(height, 1.0)  # a zero is a visible line, unlike a missing window
        bars.append(
            Bar(
                x=round(index * slot + slot * 0.1, 2),
                y=round(_TOP + plot - height, 2),
                width=round(slot * 0.8, 2),
                height=round(height, 2),
                label=f"{label}: {shown(value)}",
            )
        )
    return Chart(
        title=title,
        bars=bars,
        top=shown(scale),
        first=windows[0][0][:10] if windows else "",
        last=windows[-1][0][:10] if windows else "",
    )


def _percent(value: float) -> str:
    return f"{value:.0%}"


def memory_charts(windows: Sequence[Any]) -> list[Chart]:
    """The charts of the memory page from ``MemoryStats.windows`` (``StatsRow``s, oldest
    first): recall hit rate (recalls that returned a note), staleness (stale notes left
    out), and tokens saved by compaction."""
    hit = [(row.group, 1.0 - row.empty_share if row.recalls else None) for row in windows]
    stale = [(row.group, row.stale_share) for row in windows]
    saved = [(row.group, float(row.tokens_saved) if row.compactions else None) for row in windows]
    return [
        chart("recall hit rate", hit, top=1.0, shown=_percent),
        chart("stale notes left out", stale, top=1.0, shown=_percent),
        chart("tokens saved", saved, shown=lambda value: f"{value:,.0f}"),
    ]
