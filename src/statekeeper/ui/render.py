"""Pages as HTML or JSON: one view, two answers.

A view returns a :class:`Page`: its template, the data a script gets as JSON, and what
else the template needs. :func:`respond` answers with JSON when the path is under
``/api/`` or the request prefers ``application/json``, else with the rendered template.

The templates are rendered with autoescaping on for every template, so a stored string
(a thread id, metadata, a message) is always text; ``ident`` also makes invisible and
bidirectional-override characters, and spaces HTML would collapse or hide, visible, so a
thread id cannot pass for another, and every page's title shows them with the same marks
(:func:`marked`). Times show their zone (:func:`when`), and ``time`` wraps them in a
``<time>`` element whose ``datetime`` is the stored value.
"""

from __future__ import annotations

import datetime
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
# letters and symbols drawn as blank space, which an id could hold in place of a space
_BLANK = {"\u115f", "\u1160", "\u2800", "\u3164", "\uffa0"}


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
        time=time_tag,
        bytes=human_bytes,
        signed=lambda number: f"{number:+,}",
        short=short,
    )
    env.globals.update(url=url, nsname=nsname)
    return env


def _marks(text: str) -> list[tuple[str, str | None]]:
    """Each character of ``text`` with its mark (``"U+202E"``), or ``None`` for one shown
    as itself. Marked: control, format (bidi overrides, zero-width), private-use and
    line-separator characters, which would act instead of show; every space but the ASCII
    one (no-break, en, ideographic...) and letters drawn blank, which look like it or like
    nothing; and ASCII spaces that HTML would collapse or hide: leading, trailing, or two
    and more in a row. A single ASCII space between two other characters is itself."""
    last = len(text) - 1
    found: list[tuple[str, str | None]] = []
    for index, char in enumerate(text):
        if char == " ":
            alone = 0 < index < last and text[index - 1] != " " and text[index + 1] != " "
            found.append((char, None if alone else "U+0020"))
        elif unicodedata.category(char) in _SHOWN_AS_CODE or _blank(char):
            found.append((char, f"U+{ord(char):04X}"))
        else:
            found.append((char, None))
    return found


def _blank(char: str) -> bool:
    return unicodedata.category(char) == "Zs" or char in _BLANK


def ident(value: Any) -> Markup:
    """``value`` as escaped text, with the characters :func:`_marks` marks shown as
    ``<U+202E>`` marks instead of acting, or of looking like another: control, format
    (bidi overrides, zero-width) and line-separator characters, spaces other than ASCII's,
    and ASCII spaces leading, trailing or in a run, so ``"a b"`` and ``"a  b"`` differ."""
    parts = []
    for char, mark in _marks(str(value)):
        if mark is None:
            parts.append(escape(char))
        else:
            parts.append(Markup('<span class="ctl">&lt;{}&gt;</span>').format(mark))
    return Markup("").join(parts)


def marked(value: Any) -> str:
    """``value`` as plain text with the marks of :func:`ident` (``<U+202E>``), for where
    no markup can go: a page's ``<title>``, which tabs and the history show."""
    return "".join(char if mark is None else f"<{mark}>" for char, mark in _marks(str(value)))


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


def _moment(ts: Any) -> datetime.datetime | None:
    """``ts`` as a datetime: a datetime, or ISO 8601 text with a time of day; else ``None``."""
    if isinstance(ts, datetime.datetime):
        return ts
    if not isinstance(ts, str) or len(ts.strip()) <= 10:  # a date alone is no moment
        return None
    try:
        return datetime.datetime.fromisoformat(ts.strip())
    except ValueError:
        return None


def when(ts: Any) -> str:
    """An ISO 8601 time to the second, with its zone: ``2025-01-02 10:11:12 UTC`` when
    its offset is zero (LangGraph writes UTC), else the offset (``... 10:11:12 +02:00``);
    a time stored without an offset is shown without one, and anything that is not a time
    as it is. The exact value is for :func:`time_tag`'s ``datetime``, or the JSON."""
    moment = _moment(ts)
    if moment is None:
        return str(ts or "")
    text = moment.strftime("%Y-%m-%d %H:%M:%S")
    offset = moment.utcoffset()
    if offset is None:
        return text
    if not offset:
        return f"{text} UTC"
    seconds = int(offset.total_seconds())
    sign = "-" if seconds < 0 else "+"
    hours, rest = divmod(abs(seconds), 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{text} {sign}{hours:02d}:{minutes:02d}" + (f":{seconds:02d}" if seconds else "")


def time_tag(ts: Any) -> Markup:
    """``<time datetime="STORED">`` around :func:`when`'s text: the page shows the time to
    the second with its zone, the ``datetime`` attribute (and a tooltip) has the exact
    stored value. Anything that is not a time is shown as text, without the element."""
    moment = _moment(ts)
    if moment is None:
        return escape(when(ts))
    exact = ts.strip() if isinstance(ts, str) else moment.isoformat()
    return Markup('<time datetime="{}" title="{}">{}</time>').format(exact, exact, when(ts))


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
