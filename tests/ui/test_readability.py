"""The inspector stays readable whatever it shows and wherever: ids of any length or
spacing, times that say their zone, a bad search made as you type (htmx), and a
phone-sized window (390 x 844) as well as a desktop one.

The server-side tests run on every backend (``BACKENDS``), over threads written through
the runner as users do; the browser tests drive Debian's Chromium with Playwright, as
``test_browser.py`` does (skipped without it, failed under ``CI=true``).
"""

from __future__ import annotations

import datetime
import html
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from statekeeper.checkpointers import open_checkpointer
from statekeeper.graphs import Runner
from statekeeper.memory.conflicts import write_note
from statekeeper.memory.notes import Note, Provenance
from statekeeper.memory.store import open_store
from statekeeper.ui import UIOptions, create_app
from statekeeper.ui.render import ident, marked, time_tag, when
from statekeeper.ui.server import Background, bind
from tests.conftest import BACKENDS, Backend
from tests.ui.conftest import (
    ARGS,
    CHROMIUM,
    QUESTION,
    REF,
    TOKEN,
    client_for,
    populate_store,
    populate_threads,
    store_url,
)

LONG_ID = "L" * 400
# ids a browser would draw alike if the page let HTML collapse or hide their spaces
SPACED = [
    "dup id",
    "dup  id",
    "dup id ",
    " dup id",
    "dup\u00a0id",  # no-break space
    "dup\u2002id",  # en space
    "dup\u3000id",  # ideographic space
    "dup\u3164id",  # Hangul filler: a letter drawn blank
]
UNSAID_NS = ("notes", "unsaid")
T0 = datetime.datetime(2025, 3, 1, 9, 0, tzinfo=datetime.UTC)


@dataclass
class Spaced:
    """Threads whose ids differ only in spaces, a 400-character id, and a note that does
    not say when its messages were said."""

    saver: Any
    store: Any
    label: str


def _write(saver: Any, store: Any) -> None:
    runner = Runner(saver)
    for thread_id in SPACED:
        runner.run(REF, QUESTION, thread_id=thread_id)
    runner.run(REF, QUESTION, thread_id=LONG_ID)  # newest: listed first
    provenance = Provenance(
        thread_id=LONG_ID, message_ids=("m1",), created_at=T0, summarizer="test/1"
    )
    write_note(store, UNSAID_NS, Note(text="said at no known time", provenance=provenance))


@pytest.fixture(scope="module", params=BACKENDS, ids=str)
def spaced(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Spaced]:
    backend: Backend = request.param
    tmp = tmp_path_factory.mktemp(backend.name)
    url = backend.url_for(tmp)
    with open_checkpointer(url) as saver, open_store(store_url(backend, url, tmp)) as store:
        _write(saver, store)
        yield Spaced(saver, store, url)
    if backend.cleanup is not None:
        backend.cleanup(url)


@pytest.fixture(scope="module")
def client(spaced: Spaced) -> Any:
    options = UIOptions(saver=spaced.saver, token=TOKEN, store=spaced.store, port=8765)
    return client_for(create_app(options))


def _visible(fragment: str) -> str:
    """What a reader sees of an HTML fragment: its text, with every run of spaces (ASCII
    or not: a no-break or ideographic space looks like any other) drawn as one, and none
    at the ends, as a browser lays it out."""
    text = html.unescape(re.sub(r"<[^>]*>", "", fragment))
    return re.sub(r"[\s\u3164]+", " ", text).strip()


def _links(text: str) -> dict[str, str]:
    """The thread links of a page: thread id (from the URL) -> what the link shows."""
    from urllib.parse import parse_qs, urlsplit

    found = {}
    for href, shown in re.findall(r'<a class="tid" href="([^"]*)">(.*?)</a>', text, re.DOTALL):
        (thread_id,) = parse_qs(urlsplit(html.unescape(href)).query)["thread"]
        found[thread_id] = shown
    return found


# -- times ------------------------------------------------------------------------------


def test_when_shows_the_zone_of_the_stored_time() -> None:
    stored_as = {  # stored -> shown
        "2026-12-05T16:45:34.123456+00:00": "2026-12-05 16:45:34 UTC",
        "2026-12-05T16:45:34Z": "2026-12-05 16:45:34 UTC",
        "2026-12-05T16:45:34+02:00": "2026-12-05 16:45:34 +02:00",
        "2026-12-05T16:45:34.5-05:30": "2026-12-05 16:45:34 -05:30",
        "2026-12-05T16:45:34": "2026-12-05 16:45:34",  # stored without a zone: none shown
        "not a time": "not a time",
        "": "",
    }
    assert {stored: when(stored) for stored in stored_as} == stored_as
    moment = datetime.datetime(2026, 12, 5, 16, 45, 34, tzinfo=datetime.UTC)
    assert when(moment) == "2026-12-05 16:45:34 UTC"  # a note's times, before JSON
    assert when(None) == ""


def test_a_time_element_carries_the_stored_value() -> None:
    stored = "2026-12-05T16:45:34.123456+00:00"
    assert time_tag(stored) == (
        f'<time datetime="{stored}" title="{stored}">2026-12-05 16:45:34 UTC</time>'
    )
    assert time_tag('<b>"x"</b>') == "&lt;b&gt;&#34;x&#34;&lt;/b&gt;"  # not a time: text


def test_pages_show_times_with_their_zone_and_the_exact_value(client: Any, spaced: Spaced) -> None:
    """The threads list and a note show each time with its zone, in a ``<time>`` whose
    ``datetime`` is the stored value; the JSON keeps that value whole."""
    rows = client.get("/api/threads").json()["threads"]
    head = spaced.saver.get_tuple({"configurable": {"thread_id": LONG_ID, "checkpoint_ns": ""}})
    (row,) = [row for row in rows if row["thread_id"] == LONG_ID]
    assert row["updated"] == head.checkpoint["ts"]  # JSON: as stored, to the microsecond
    text = client.get("/threads").text
    for row in rows:
        stored = row["updated"]
        assert f'<time datetime="{stored}" title="{stored}">{when(stored)}</time>' in text
        assert when(stored).endswith(" UTC")  # LangGraph writes UTC
    notes = client.get("/memory/notes", params={"ns": list(UNSAID_NS)}).text
    made = client.get("/api/memory/notes", params={"ns": list(UNSAID_NS)}).json()
    created = made["items"][0]["note"]["provenance"]["created_at"]
    assert f'<time datetime="{created}" title="{created}">2025-03-01 09:00:00 UTC</time>' in notes


def test_a_note_that_does_not_say_when_it_was_said_says_unknown(client: Any) -> None:
    text = client.get("/memory/notes", params={"ns": list(UNSAID_NS)}).text
    said = re.search(r"<dt>said</dt><dd>(.*?)</dd>", text, re.DOTALL)
    assert said is not None
    assert _visible(said.group(1)) == "unknown"


# -- ids --------------------------------------------------------------------------------


def test_ident_marks_spaces_a_page_would_collapse_or_hide() -> None:
    marks = {  # id -> shown
        "dup id": "dup id",  # one space between two characters: itself
        "dup  id": "dup<U+0020><U+0020>id",
        "dup id ": "dup id<U+0020>",
        " dup": "<U+0020>dup",
        " ": "<U+0020>",
        "dup\u00a0id": "dup<U+00A0>id",
        "a\u2000b\u200ac": "a<U+2000>b<U+200A>c",
        "dup\u3000id": "dup<U+3000>id",
        "dup\u3164id": "dup<U+3164>id",
        "tab\there": "tab<U+0009>here",
        "\u202eevil": "<U+202E>evil",
    }
    assert {value: marked(value) for value in marks} == marks  # a page's <title>
    as_html = {
        value: html.escape(shown, quote=False)
        .replace("&lt;U+", '<span class="ctl">&lt;U+')
        .replace("&gt;", "&gt;</span>")
        for value, shown in marks.items()
    }
    assert {value: str(ident(value)) for value in marks} == as_html


def test_ids_that_differ_only_in_spaces_look_different(client: Any) -> None:
    """``docs/ui.md``: one id cannot pose as another. HTML draws ``dup  id``, ``dup id ``
    and ``dup\\u00a0id`` as ``dup id``; the pages mark what it would hide."""
    links = _links(client.get("/threads").text)
    assert set(SPACED) <= set(links)
    seen = {_visible(links[thread_id]) for thread_id in SPACED}
    assert len(seen) == len(SPACED), seen
    assert _visible(links["dup id"]) == "dup id"  # a single space stays a plain space
    titles, headings = set(), set()
    for thread_id in SPACED:
        text = client.get("/thread", params={"thread": thread_id}).text
        heading = re.search(r'<h1>Thread <span class="tid">(.*?)</span></h1>', text)
        title = re.search(r"<title>(.*?)</title>", text, re.DOTALL)
        assert heading is not None
        assert title is not None
        headings.add(_visible(heading.group(1)))
        titles.add(_visible(title.group(1)))
        assert client.get("/api/thread", params={"thread": thread_id}).json()["thread_id"] == (
            thread_id  # JSON: exact
        )
    assert len(headings) == len(titles) == len(SPACED)


# -- a bad search, made as you type -----------------------------------------------------


def _attributes(text: str, tag: str, class_name: str) -> dict[str, str]:
    """The attributes of the first ``tag`` of class ``class_name`` in the page."""
    from html.parser import HTMLParser

    found: list[dict[str, str]] = []

    class Finder(HTMLParser):
        def handle_starttag(self, name: str, attrs: list[tuple[str, str | None]]) -> None:
            values = {key: value or "" for key, value in attrs}
            if name == tag and class_name in values.get("class", "").split():
                found.append(values)

    Finder().feed(text)
    assert found, f"no <{tag} class={class_name}> in the page"
    return found[0]


def _htmx_config(text: str) -> dict[str, Any]:
    found = re.search(r"<meta name=\"htmx-config\" content='([^']*)'>", text)
    assert found is not None, "the page configures no htmx"
    config: dict[str, Any] = json.loads(html.unescape(found.group(1)))
    return config


def _swaps(config: dict[str, Any], status: int) -> bool:
    """Whether htmx swaps a response with ``status`` in: its first ``responseHandling``
    rule whose ``code`` (a regular expression) matches decides (htmx 2's own default
    rules drop every 4xx)."""
    default = [
        {"code": "204", "swap": False},
        {"code": "[23]..", "swap": True},
        {"code": "[45]..", "swap": False, "error": True},
    ]
    for rule in config.get("responseHandling", default):
        if re.search(rule["code"], str(status)):
            return bool(rule["swap"])
    return False


def test_a_bad_metadata_search_under_htmx_is_swapped_into_the_list(client: Any) -> None:
    """Typed with JavaScript on, ``nokey`` (no ``=``) is a 400 whose page says what a
    term looks like; htmx swaps it in where the list was, as it swaps a list, so the
    message shows (it used to be dropped: the old list stayed, the console said 400)."""
    page = client.get("/threads").text
    attrs = _attributes(page, "form", "search")
    assert attrs["hx-target"] == "#thread-list"
    assert attrs["hx-swap"] == "innerHTML"  # the target stays, for the next search
    selected = [part.strip() for part in attrs["hx-select"].split(",")]
    assert "#error" in selected
    assert "#thread-list > *" in selected
    config = _htmx_config(page)
    assert _swaps(config, 200)
    assert _swaps(config, 400)
    assert not _swaps(config, 500)
    assert not _swaps(config, 204)

    response = client.get("/threads", params={"meta": "nokey"}, headers={"HX-Request": "true"})
    assert response.status_code == 400
    assert response.headers["content-type"].startswith("text/html")
    error = re.search(
        r'<section class="panel error" id="error">(.*?)</section>', response.text, re.DOTALL
    )
    assert error is not None, "the 400 page has nothing htmx would select"
    assert "metadata search terms are key=value, got &#39;nokey&#39;" in error.group(1)
    assert 'id="thread-list"' not in response.text  # so the list's selector takes nothing
    ok = client.get("/threads", params={"meta": "source=loop"}, headers={"HX-Request": "true"})
    assert ok.status_code == 200
    assert 'id="error"' not in ok.text
    assert 'id="thread-list"' in ok.text


# -- in a browser -----------------------------------------------------------------------

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 800}
LABEL = "sqlite:///" + "/a-rather-long-folder-name" * 4 + "/state.db"


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The read-only inspector over SQLite holding ``conftest``'s threads and notes and
    this module's (the 400-character id written last, so listed first); its base URL."""
    url = f"sqlite:///{tmp_path_factory.mktemp('readable')}/state.db"
    with open_checkpointer(url) as saver, open_store(url) as store:
        found = populate_threads(saver)
        populate_store(store, found["done_head"])
        _write(saver, store)
        sock = bind("127.0.0.1", 0)
        port = sock.getsockname()[1]
        options = UIOptions(saver=saver, token=TOKEN, store=store, port=port, label=LABEL)
        with sock, Background(create_app(options), sock):
            yield f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def context(playwright: Any, base: str) -> Iterator[Any]:
    """A browser context signed in through the token URL."""
    browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
    opened = browser.new_context(viewport=DESKTOP)
    opened.new_page().goto(f"{base}/?token={TOKEN}")
    yield opened
    opened.close()
    browser.close()


@pytest.fixture
def page(context: Any) -> Iterator[Any]:
    opened = context.new_page()
    yield opened
    opened.close()


def _pages(base: str) -> dict[str, str]:
    from urllib.parse import quote

    return {
        "threads": f"{base}/threads",
        "thread": f"{base}/thread?thread={quote(LONG_ID)}",
        "checkpoint": f"{base}/checkpoint?thread={quote(LONG_ID)}",
        "interrupts": f"{base}/interrupts",
        "notes": f"{base}/memory/notes?ns=notes&ns=unsaid",
    }


def _width(page: Any) -> tuple[int, int]:
    found: list[int] = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    return found[0], found[1]


def test_a_phone_sized_window_never_scrolls_sideways(page: Any, base: str) -> None:
    """At 390 x 844 the header wraps in a few lines (the storage label cut with an
    ellipsis, all of it in its title), every link of it is on screen, and no page is
    wider than the window, the 400-character id in the list, the tree and the crumbs
    included: a table too wide scrolls in its own box."""
    page.set_viewport_size(PHONE)
    for name, address in _pages(base).items():
        page.goto(address)
        assert page.locator(".tid", has_text="LLLL").count() >= 1, name
        scroll_width, width = _width(page)
        assert scroll_width <= width, f"{name}: {scroll_width} px wide in a {width} px window"
        header = page.locator("header.top").bounding_box()
        assert header["height"] < 200, f"{name}: the header is {header['height']} px tall"
        for link in page.locator("header.top a").all():
            box = link.bounding_box()
            assert box["x"] >= 0, link.inner_text()
            assert box["x"] + box["width"] <= width, link.inner_text()
    storage = page.locator("header.top .storage")
    assert LABEL in (storage.get_attribute("title") or "")
    assert storage.evaluate("e => e.scrollWidth > e.clientWidth")  # cut, not wrapped
    assert storage.evaluate("e => getComputedStyle(e).textOverflow") == "ellipsis"


def test_a_long_id_does_not_widen_a_desktop_page(page: Any, base: str) -> None:
    page.set_viewport_size(DESKTOP)
    for name, address in _pages(base).items():
        page.goto(address)
        scroll_width, width = _width(page)
        assert scroll_width <= width, f"{name}: {scroll_width} px wide in a {width} px window"
    page.goto(_pages(base)["threads"])
    row = page.locator("tr.thread-row", has=page.locator("a.tid", has_text="LLLL"))
    status = row.locator(".status").bounding_box()
    assert status["x"] + status["width"] <= DESKTOP["width"]  # the status stays on screen


def test_ids_differing_only_in_spaces_read_differently_in_the_browser(page: Any, base: str) -> None:
    page.goto(f"{base}/threads?q=dup")
    shown = [text.strip() for text in page.locator("a.tid").all_inner_texts()]
    assert len(shown) == len(SPACED)
    normalized = {re.sub(r"[\s\u3164]+", " ", text) for text in shown}
    assert len(normalized) == len(SPACED), shown


def test_a_bad_metadata_search_shows_its_error_with_javascript_on(page: Any, base: str) -> None:
    """htmx swaps the 400 page's message in where the list was; a good search then
    brings the list back in the same place."""
    from playwright.sync_api import expect

    page.set_viewport_size(DESKTOP)
    page.goto(f"{base}/threads")
    page.fill('input[name="meta"]', "nokey")
    # (a locator waits: wait_for_function would evaluate a string, which the CSP forbids)
    error = page.locator("#thread-list #error")
    expect(error).to_contain_text("metadata search terms are key=value, got 'nokey'")
    expect(page.locator("tr.thread-row")).to_have_count(0)
    page.fill('input[name="meta"]', "source=fork")
    expect(page.locator("#thread-list tr.thread-row")).to_have_count(1)
    expect(error).to_have_count(0)
    assert page.locator("#thread-list").count() == 1


def test_a_long_list_and_long_tool_arguments_are_shown_whole_on_demand() -> None:
    """A list past 500 items ended in "… 700 more" and a tool call's arguments at 400
    characters, with no way to see the rest on the page."""
    from statekeeper.ui.render import environment

    env = environment()
    page = env.from_string('{% from "macros.html" import tree %}{{ tree(v) }}').render(
        v=[f"item-{i}" for i in range(1200)]
    )
    assert "<summary>… 700 more</summary>" in page
    assert "item-1199" in page
    from langchain_core.messages import AIMessage

    from statekeeper.ui.values import as_chat

    call = {"name": "f", "args": {"query": "x" * 1000}, "id": "c1"}
    messages = as_chat([AIMessage("", tool_calls=[call], id="m1")])
    chat = env.from_string('{% from "macros.html" import chat %}{{ chat(m) }}').render(m=messages)
    assert 'details class="long-args"' in chat
    assert "x" * 1000 in chat
