"""Interrupts, and the two actions of ``--write``: answer (resume) and fork.

The actions are the CLI's ``statekeeper resume --answer`` and ``statekeeper fork``,
through the same code: :class:`statekeeper.graphs.Runner`, which claims the thread for
the run, loads the graph the thread's metadata names (or ``--graph``), validates and
migrates the state, and refuses what the CLI refuses (a finished thread, an answer
nothing waits for, a busy thread...) with the same errors, shown as error pages.

These views are routed only when the app was built with ``write=True``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from starlette.responses import RedirectResponse, Response

from statekeeper.errors import ConfigurationError, StatekeeperError
from statekeeper.threads import claim_holder, list_threads, summarize
from statekeeper.ui.pages_threads import failures, interrupt_values
from statekeeper.ui.render import Page, json_response, url, wants_json
from statekeeper.ui.values import plain, split_channels

if TYPE_CHECKING:
    from starlette.requests import Request

    from statekeeper.graphs import Runner
    from statekeeper.ui.app import Form, Inspector

__all__ = ["fork", "interrupts", "resume"]

_RESUMABLE = ("interrupted", "failed", "pending")


def interrupts(inspector: Inspector, request: Request, form: Form) -> Page:
    """Every thread waiting at an ``interrupt()``, with what it asks; then the other
    threads with work left (failed or pending), which resume without an answer."""
    waiting: list[dict[str, Any]] = []
    unfinished: list[dict[str, Any]] = []
    unreadable: list[dict[str, str]] = []
    for thread_id in list_threads(inspector.saver):
        try:
            tup = inspector.saver.get_tuple(
                {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
            )
        except StatekeeperError as exc:
            unreadable.append({"thread_id": thread_id, "error": f"{type(exc).__name__}: {exc}"})
            continue
        if tup is None:
            continue
        summary = summarize(tup, holder=claim_holder(inspector.saver, thread_id))
        if summary.status not in _RESUMABLE:
            continue
        row = {
            **plain(summary),
            "interrupts": interrupt_values(tup),
            "failures": failures(inspector.saver, tup),
        }
        (waiting if summary.status == "interrupted" else unfinished).append(row)
    data = {"waiting": waiting, "unfinished": unfinished, "unreadable": unreadable}
    return Page("interrupts.html", data, title="Interrupts")


def _runner(inspector: Inspector) -> Runner:
    from statekeeper.checkpointers.base import Checkpointer
    from statekeeper.graphs import Runner

    if not isinstance(inspector.saver, Checkpointer):
        raise ConfigurationError(
            "resuming and forking need a statekeeper checkpointer (opened from a URL)"
        )
    return Runner(inspector.saver)


def _answer(form: Form) -> Any:
    """The answer, as ``statekeeper resume --answer`` reads it: a JSON body's value as
    is; a form's text as JSON when it parses, else the text itself."""
    if form.is_json:
        return form.fields["answer"]
    text = form.text("answer")
    try:
        return json.loads(text)
    except ValueError:
        return text


def _ran_graph(call: Any) -> Any:
    """Run ``call``; what a node raised becomes an error page that says the thread kept
    its last completed step (as the CLI's exit 1 does)."""
    try:
        return call()
    except StatekeeperError:
        raise
    except Exception as exc:
        data = {
            "error": "NodeFailed",
            "message": f"the graph raised {type(exc).__name__}: {exc}; the thread keeps its "
            "last completed step: fix the cause, then resume it",
            "status": 500,
            "damage": None,
        }
        return Page("error.html", data, status=500, title="The graph raised")


def _done(request: Request, form: Form, result: Any, thread_id: str, did: str) -> Page | Response:
    """The run's result as JSON, or the thread's page, which says what was ``did`` (one
    of :data:`~statekeeper.ui.pages_threads.DONE`) and, for a form sent from the
    interrupts page, links back to it."""
    if isinstance(result, Page):
        return result
    if wants_json(request):
        return json_response(result)
    back = "interrupts" if form.text("back") == "interrupts" else None
    return RedirectResponse(url("/thread", thread=thread_id, did=did, back=back), status_code=303)


def resume(inspector: Inspector, request: Request, form: Form) -> Page | Response:
    """Resume ``thread`` (``statekeeper resume``): with its ``answer`` to the pending
    ``interrupt()``, or, without one (a form's ``mode=continue``, a JSON body without
    ``answer``), from its last completed step."""
    thread_id = form.fields.get("thread")
    if not isinstance(thread_id, str) or not thread_id:
        raise ConfigurationError("which thread? the form needs a thread field")
    runner = _runner(inspector)
    ref = inspector.options.graph_ref
    answering = "answer" in form.fields and form.fields.get("mode", "answer") == "answer"
    if answering:
        answer = _answer(form)
        result = _ran_graph(lambda: runner.resume(thread_id, answer=answer, graph_ref=ref))
    else:
        result = _ran_graph(lambda: runner.resume(thread_id, graph_ref=ref))
    return _done(request, form, result, thread_id, "answered" if answering else "resumed")


def _edited_values(inspector: Inspector, form: Form, thread_id: str, checkpoint_id: str) -> Any:
    """The fork's edited state, or ``None`` when the form's state is the stored one. Each
    field shown unchanged keeps its stored value (its exact type, such as a message);
    only edited fields take the submitted JSON."""
    raw = form.fields.get("values")
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return None
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError as exc:
            raise ConfigurationError(f"the edited state is not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigurationError("the edited state must be a JSON object of fields")
    stored, _ = split_channels(
        inspector.checkpoint(thread_id, "", checkpoint_id).checkpoint["channel_values"]
    )
    values = {
        key: stored[key] if key in stored and plain(stored[key]) == value else value
        for key, value in raw.items()
    }
    unchanged = values.keys() == stored.keys() and all(values[k] is stored[k] for k in values)
    return None if unchanged else values


def fork(inspector: Inspector, request: Request, form: Form) -> Page | Response:
    """Fork ``thread`` at ``checkpoint`` (``statekeeper fork``) into ``to`` (default: the
    same thread), with the edited state ``values`` when they differ from the stored."""
    thread_id, checkpoint_id = form.fields.get("thread"), form.fields.get("checkpoint")
    if not (
        isinstance(thread_id, str)
        and thread_id
        and isinstance(checkpoint_id, str)
        and checkpoint_id
    ):
        raise ConfigurationError("a fork needs the thread and checkpoint fields")
    target = form.fields.get("to") or None
    if target is not None and not isinstance(target, str):
        raise ConfigurationError("to must be a thread id")
    # a reference (prefix, @STEP...) as `statekeeper fork` takes it, to the one id
    checkpoint_id = inspector.checkpoint(thread_id, "", checkpoint_id).checkpoint["id"]
    values = _edited_values(inspector, form, thread_id, checkpoint_id)
    result = _runner(inspector).fork(
        thread_id,
        checkpoint_id,
        to_thread=target,
        graph_ref=inspector.options.graph_ref,
        values=values,
    )
    return _done(request, form, result, result.thread_id, "forked")
