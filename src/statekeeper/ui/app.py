"""The inspector's web app: :func:`create_app` builds it from :class:`UIOptions`.

Every page is a plain function ``(inspector, request, form) -> Page`` run in a worker
thread (the savers are synchronous and thread-safe), answered as HTML or JSON
(:mod:`statekeeper.ui.render`), behind :class:`~statekeeper.ui.security.Guard`. A
:class:`~statekeeper.errors.StatekeeperError` becomes an error page with the status
that fits it (404 unknown thread, 409 busy or refused, 400 bad input, 500 damaged
storage...), and a corrupt checkpoint shows what is damaged; no page shows a traceback.

The write routes (resume, fork) exist only when ``UIOptions.write`` is set: without it
a POST to them finds nothing (404), whatever it carries.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple
from langgraph.store.base import BaseStore
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from statekeeper.errors import (
    AnswerRequiredError,
    ConfigurationError,
    CorruptCheckpointError,
    InvalidIdError,
    NoPendingInterruptError,
    NothingToResumeError,
    ReadOnlyError,
    StatekeeperError,
    StateValidationError,
    StorageNotFoundError,
    ThreadBusyError,
    ThreadExistsError,
    ThreadNotFoundError,
)
from statekeeper.refs import namespaces_text, resolve_checkpoint, thread_namespaces
from statekeeper.ui import pages_actions, pages_checkpoint, pages_graph, pages_memory, pages_threads
from statekeeper.ui.render import Page, environment, respond
from statekeeper.ui.security import LOOPBACK_HOSTS, Guard, GuardSettings

__all__ = ["Form", "Inspector", "UIOptions", "create_app"]

log = logging.getLogger("statekeeper.ui")

_MAX_BODY = 8 * 1024 * 1024  # a form or JSON body; edited state is the largest

# most specific first: the first match decides the status
_STATUS: list[tuple[type[Exception], int]] = [
    (ThreadNotFoundError, 404),
    (StorageNotFoundError, 404),
    (ThreadBusyError, 409),
    (ThreadExistsError, 409),
    (NothingToResumeError, 409),
    (NoPendingInterruptError, 409),
    (AnswerRequiredError, 409),
    (ReadOnlyError, 403),
    (StateValidationError, 422),
    (ConfigurationError, 400),
    (InvalidIdError, 400),  # a malformed or ambiguous checkpoint reference
    (StatekeeperError, 500),
]


@dataclass(frozen=True)
class UIOptions:
    """What the inspector serves.

    - ``saver``: the opened checkpointer (the app never closes it);
    - ``token``: the one-time token of the start URL (``security.new_token()``);
    - ``store``: the memory store, or a function that opens it on the first visit to a
      memory page (so a store is not opened, or created, unless it is looked at);
    - ``graph_ref``: the graph to draw and run (``"module:attr"``); without it, the one
      a thread's metadata names;
    - ``write``: serve the resume and fork actions (otherwise they do not exist);
    - ``allowed_hosts`` / ``port``: what ``Host`` and ``Origin`` may name;
    - ``label``: the storage as shown in the page header (a redacted URL).
    """

    saver: BaseCheckpointSaver[Any]
    token: str
    store: BaseStore | Callable[[], BaseStore] | None = None
    graph_ref: str | None = None
    write: bool = False
    allowed_hosts: tuple[str, ...] = LOOPBACK_HOSTS
    port: int | None = None
    label: str = ""


@dataclass(frozen=True)
class Form:
    """A submitted form (text fields) or JSON object (any values)."""

    fields: Mapping[str, Any]
    is_json: bool = False

    def text(self, name: str, default: str = "") -> str:
        value = self.fields.get(name, default)
        return value if isinstance(value, str) else default


class Inspector:
    """What every page reads: the options, the store (opened once, when first needed),
    the templates, and the one way to load a checkpoint."""

    def __init__(self, options: UIOptions) -> None:
        self.options = options
        self.saver = options.saver
        self.env = environment()
        self._store = options.store if isinstance(options.store, BaseStore) else None
        self._lock = threading.Lock()

    @property
    def write(self) -> bool:
        return self.options.write

    def store(self) -> BaseStore | None:
        """The memory store; ``None`` when none was given."""
        with self._lock:
            if self._store is None and callable(self.options.store):
                self._store = self.options.store()
            return self._store

    def checkpoint(
        self, thread_id: str, ns: str = "", checkpoint_id: str | None = None
    ) -> CheckpointTuple:
        """The checkpoint ``checkpoint_id`` (default: the newest) of ``thread_id`` in
        namespace ``ns``: an id or any reference ``statekeeper show`` takes (a unique
        prefix, ``@STEP``, ``~N``...: :func:`statekeeper.refs.resolve_checkpoint`).

        Raises:
            ThreadNotFoundError: there is no such thread or checkpoint.
            InvalidIdError: the reference is malformed, or ambiguous
                (``AmbiguousReferenceError``).
        """
        if checkpoint_id:
            return resolve_checkpoint(self.saver, thread_id, checkpoint_id, ns=ns)
        tup = self.saver.get_tuple({"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}})
        if tup is not None:
            return tup
        namespaces = thread_namespaces(self.saver, thread_id) if ns else []
        if namespaces:  # the thread is there, in other namespaces: say which
            raise ThreadNotFoundError(
                f"no namespace {ns!r} in thread {thread_id!r}; it has "
                f"{namespaces_text(namespaces)}",
                thread_id=thread_id,
            )
        raise ThreadNotFoundError(f"no thread {thread_id!r}", thread_id=thread_id)

    def respond(self, request: Request, page: Page) -> Response:
        common = {
            "write": self.write,
            "label": self.options.label,
            "graph_ref": self.options.graph_ref,
        }
        return respond(request, page, self.env, common)


View = Callable[[Inspector, Request, Form], Page | Response]


def error_page(exc: Exception) -> Page:
    """The page for ``exc``: its type, its message, and for a corrupt checkpoint the
    damage record (what ``verify`` reports for it)."""
    status = next((code for kind, code in _STATUS if isinstance(exc, kind)), 500)
    damage = exc.damage if isinstance(exc, CorruptCheckpointError) else None
    data = {
        "error": type(exc).__name__,
        "message": str(exc),
        "status": status,
        "damage": damage,
    }
    return Page("error.html", data, status=status, title=f"{status} {type(exc).__name__}")


def _page(view: View) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        inspector: Inspector = request.app.state.inspector
        form = await _form(request) if request.method == "POST" else Form({})
        # the view and its rendering run in a worker thread: both may take a while
        return await run_in_threadpool(_answer, inspector, view, request, form)

    return endpoint


def _answer(inspector: Inspector, view: View, request: Request, form: Form) -> Response:
    try:
        result = view(inspector, request, form)
        return result if isinstance(result, Response) else inspector.respond(request, result)
    except HTTPException:
        raise  # answered by _http_error
    except StatekeeperError as exc:
        return inspector.respond(request, error_page(exc))
    except Exception as exc:  # a page never shows a traceback; the log has it
        log.exception("page %s failed", request.url.path)
        page = error_page(exc)
        page.data["message"] = (
            f"{type(exc).__name__} while building this page; the server's log has the details"
        )
        return inspector.respond(request, page)


async def _form(request: Request) -> Form:
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > _MAX_BODY:
            raise HTTPException(413, f"a request body may have at most {_MAX_BODY} bytes")
    kind = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if kind == "application/json":
        try:
            parsed = json.loads(body or b"{}")
        except ValueError as exc:
            raise HTTPException(400, f"the body is not JSON: {exc}") from None
        if not isinstance(parsed, dict):
            raise HTTPException(400, "the body must be a JSON object")
        return Form(parsed, is_json=True)
    return Form(dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True)))


def _twin(path: str, view: View, methods: tuple[str, ...] = ("GET",)) -> list[BaseRoute]:
    """The page at ``path`` and its JSON twin at ``/api{path}``."""
    endpoint = _page(view)
    return [
        Route(path, endpoint, methods=list(methods)),
        Route(f"/api{path}", endpoint, methods=list(methods)),
    ]


def _home(request: Request) -> Response:
    return RedirectResponse("/threads", status_code=303)


@dataclass
class _Routes:
    routes: list[BaseRoute] = field(default_factory=list)

    def add(self, path: str, view: View, methods: tuple[str, ...] = ("GET",)) -> None:
        self.routes.extend(_twin(path, view, methods))


def create_app(options: UIOptions) -> Starlette:
    """The inspector over ``options.saver`` (see :class:`UIOptions`). Read-only unless
    ``options.write``: only then do the POST routes that resume and fork exist."""
    table = _Routes([Route("/", _home)])
    table.add("/threads", pages_threads.threads)
    table.add("/thread", pages_threads.thread)
    table.add("/checkpoint", pages_checkpoint.checkpoint)
    table.add("/interrupts", pages_actions.interrupts)
    table.add("/graph", pages_graph.graph)
    table.add("/memory", pages_memory.memory)
    table.add("/memory/notes", pages_memory.notes)
    table.add("/memory/note", pages_memory.note)
    if options.write:
        table.add("/actions/resume", pages_actions.resume, ("POST",))
        table.add("/actions/fork", pages_actions.fork, ("POST",))
    table.routes.append(
        Mount("/static", StaticFiles(packages=[("statekeeper.ui", "static")]), name="static")
    )
    settings = GuardSettings(options.token, options.allowed_hosts, options.port)
    app = Starlette(
        routes=table.routes,
        middleware=[Middleware(Guard, settings=settings)],
        exception_handlers={HTTPException: _http_error},
    )
    app.state.inspector = Inspector(options)
    return app


async def _http_error(request: Request, exc: Exception) -> Response:
    """Unknown paths (404), wrong methods (405) and bad bodies (400, 413), as pages."""
    assert isinstance(exc, HTTPException)
    inspector: Inspector = request.app.state.inspector
    data = {
        "error": "HTTPException",
        "message": exc.detail,
        "status": exc.status_code,
        "damage": None,
    }
    page = Page("error.html", data, status=exc.status_code, title=f"{exc.status_code}")
    response = inspector.respond(request, page)
    if exc.headers:
        response.headers.update(exc.headers)
    return response
