"""Pages as HTML or JSON: one view, two answers.

A view returns a :class:`Page`: its template, the data a script gets as JSON, and what
else the template needs. :func:`respond` answers with JSON when the path is under
``/api/`` or the request prefers ``application/json``, else with the rendered template.

The templates are rendered with autoescaping on for every template, so a stored string
(a thread id, metadata, a message) is always text; ``ident`` also makes invisible and
bidirectional-override characters visible, so a thread id cannot pass for another, and
every page's title shows them with the same marks (:func:`marked`).
"""

from __future__ import annotations

import json
import unicodedata
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import jinja2
from markupsafe import Markup, escape
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from statekeeper.ui.values import dumps, plain

__all__ = ["Page", "environment", "json_response", "respond", "url", "wants_json"]

_SHOWN_AS_CODE = {"Cc", "Cf", "Co", "Cs", "Zl", "Zp"}  # control, format (bidi), private...


@dataclass
class Page:
    """What a view answers: ``data`` is the JSON answer (and the template's variables when
    it is a dict), ``context`` what only the template needs."""

    template: str
    data: Any
    context: dict[str, Any] = field(default_factory=dict)
    status: int = 200
    title: str = ""


def wants_json(request: Request) -> bool:
    """Whether to answer with JSON: an ``/api/`` path, or an ``Accept`` header that asks
    for JSON and not for HTML."""
    if request.url.path.startswith("/api/"):
        return True
    accept = request.headers.get("accept", "")
    return "application/json" in accept and "text/html" not in accept


def respond(
    request: Request, page: Page, env: jinja2.Environment, common: dict[str, Any]
) -> Response:
    """``page`` as JSON or HTML (see :func:`wants_json`)."""
    if wants_json(request):
        return json_response(page.data, page.status)
    variables = dict(page.data) if isinstance(page.data, dict) else {"data": page.data}
    variables.update(page.context)
    variables.update(common, request=request, title=marked(page.title))
    html = env.get_template(page.template).render(variables)
    return HTMLResponse(html, status_code=page.status)


def json_response(data: Any, status: int = 200) -> Response:
    """``data`` as a JSON response (any value: see :func:`~statekeeper.ui.values.plain`)."""
    body = json.dumps(plain(data), ensure_ascii=False)
    return Response(body, status_code=status, media_type="application/json")


def environment() -> jinja2.Environment:
    """The templates of ``statekeeper/ui/templates``, autoescaped, with the filters
    and globals the pages use."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("statekeeper.ui", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        ident=ident,
        json=lambda value, indent=2: dumps(value, indent=indent),
        when=when,
        bytes=human_bytes,
        signed=lambda number: f"{number:+,}",
        short=short,
    )
    env.globals.update(url=url, nsname=nsname)
    return env


def _mark(char: str) -> str | None:
    """``U+202E`` for a control, format (bidi overrides, zero-width) or line-separator
    character, which would act instead of show; ``None`` for any other."""
    return f"U+{ord(char):04X}" if unicodedata.category(char) in _SHOWN_AS_CODE else None


def ident(value: Any) -> Markup:
    """``value`` as escaped text, with control, format (bidi overrides, zero-width) and
    line-separator characters shown as ``<U+202E>`` marks instead of acting."""
    parts = []
    for char in str(value):
        mark = _mark(char)
        if mark is None:
            parts.append(escape(char))
        else:
            parts.append(Markup('<span class="ctl">&lt;{}&gt;</span>').format(mark))
    return Markup("").join(parts)


def marked(value: Any) -> str:
    """``value`` as plain text with the marks of :func:`ident` (``<U+202E>``), for where
    no markup can go: a page's ``<title>``, which tabs and the history show."""
    return "".join(f"<{mark}>" if (mark := _mark(char)) else char for char in str(value))


def url(path: str, **params: Any) -> str:
    """``path`` with the query ``params`` (``None`` left out; a list repeats the key)."""
    query = [
        (key, str(item))
        for key, value in params.items()
        if value is not None
        for item in (value if isinstance(value, list | tuple) else [value])
    ]
    return f"{path}?{urlencode(query)}" if query else path


def nsname(ns: str) -> str:
    """A checkpoint namespace as shown: the root graph's is empty."""
    return ns or "(root graph)"


def when(ts: Any) -> str:
    """An ISO 8601 time, shortened to the second (``2025-01-02 10:11:12``)."""
    text = str(ts or "")
    return text[:19].replace("T", " ") if len(text) >= 19 else text


def short(value: Any, limit: int = 120) -> str:
    text = value if isinstance(value, str) else dumps(value, indent=None)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def human_bytes(size: int | None) -> str:
    if size is None:
        return "-"
    if abs(size) < 1024:
        return f"{size:,} B"
    if abs(size) < 1024 * 1024:
        return f"{size / 1024:,.1f} KiB"
    return f"{size / (1024 * 1024):,.1f} MiB"
