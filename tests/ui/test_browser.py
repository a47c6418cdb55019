"""The inspector in a real browser: Debian's Chromium, headless, driven by Playwright
against the real server (uvicorn on a free port, in a thread).

The browser is the system's (``apt-get install chromium chromium-driver``), never one
Playwright downloads. Without it, or without the ``playwright`` package, these tests
skip and say why, except under ``CI=true``, where they fail instead.

With ``STATEKEEPER_UI_SCREENSHOTS=DIR`` they also save screenshots of the main pages as
PNG files in ``DIR`` (the ones in ``docs/img`` are made so).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from statekeeper.checkpointers import open_checkpointer
from statekeeper.memory.store import open_store
from statekeeper.ui import UIOptions, create_app
from statekeeper.ui.server import Background, bind
from tests.ui.conftest import (
    ARGS,
    CHROMIUM,
    HOSTILE_ID,
    HOSTILE_TEXT,
    TOKEN,
    populate_store,
    populate_threads,
)

SHOTS = os.environ.get("STATEKEEPER_UI_SCREENSHOTS")


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The inspector with ``--write`` over SQLite holding ``conftest``'s threads and notes;
    its base URL."""
    url = f"sqlite:///{tmp_path_factory.mktemp('browser')}/state.db"
    with open_checkpointer(url) as saver, open_store(url) as store:
        found = populate_threads(saver)
        populate_store(store, found["done_head"])
        sock = bind("127.0.0.1", 0)
        port = sock.getsockname()[1]
        label = "sqlite:///.statekeeper/state.db" if SHOTS else url  # no temp path in docs
        options = UIOptions(
            saver=saver, token=TOKEN, store=store, write=True, port=port, label=label
        )
        with sock, Background(create_app(options), sock):
            yield f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def page(playwright: Any, base: str) -> Iterator[Any]:
    """A browser page signed in through the token URL; ``page.dialogs`` records every
    dialog (``alert()``...) any page opens."""
    browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    opened = context.new_page()
    opened.dialogs = []
    opened.on("dialog", lambda dialog: (opened.dialogs.append(dialog.message), dialog.dismiss()))
    opened.goto(f"{base}/?token={TOKEN}")
    yield opened
    context.close()
    browser.close()


def _shot(page: Any, name: str, *, full: bool = False) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.evaluate("window.scrollTo(0, 0)")
        page.screenshot(path=str(Path(SHOTS) / f"{name}.png"), full_page=full)


def test_the_token_url_signs_in_and_lists_the_threads(page: Any, base: str) -> None:
    assert page.url == f"{base}/threads"  # the token left the address bar
    assert page.evaluate("document.cookie") == ""  # the session cookie is HttpOnly
    rows = page.locator("tr.thread-row")
    assert rows.count() == 4
    assert page.locator('tr.thread-row[data-status="interrupted"]').count() == 2
    _shot(page, "threads")


def test_search_as_you_type_filters_the_list(page: Any, base: str) -> None:
    """htmx, vendored and loaded under the Content-Security-Policy, swaps the list."""
    page.goto(f"{base}/threads")
    from playwright.sync_api import expect

    page.fill('input[name="q"]', "fork")
    # (a locator waits: wait_for_function would evaluate a string, which the CSP forbids)
    expect(page.locator("tr.thread-row")).to_have_count(1)
    assert page.locator("tr.thread-row a.tid").inner_text() == "forked"
    page.wait_for_url(re.compile(r".*/threads\?q=fork.*"))


def test_a_forked_threads_tree_shows_its_branch_and_head(page: Any, base: str) -> None:
    page.goto(f"{base}/threads")
    page.click("a.tid >> text=forked")
    page.wait_for_url(f"{base}/thread?thread=forked")
    root = page.locator("#ns-root")
    assert root.locator(".fork-branch").count() == 1
    assert root.locator("li.cp.head").count() == 1
    assert root.locator("li.cp.src-fork").count() == 1
    assert page.locator("details.subgraph").count() == 1  # research ran once
    _shot(page, "thread")


def test_a_checkpoints_diff(page: Any, base: str) -> None:
    page.goto(f"{base}/thread?thread=forked")
    page.locator("#ns-root li.cp.head a.diff-link").click()
    page.wait_for_url(re.compile(r".*/checkpoint\?.*#diff$"))
    change = page.locator("#diff tr.change-appended")
    assert change.count() == 1
    assert "messages" in change.inner_text()
    assert "(reply discarded)" in page.locator("#diff").inner_text()
    assert page.locator("ol.chat li.msg").count() == 5
    _shot(page, "checkpoint", full=True)


def test_the_graph_lights_the_next_node(page: Any, base: str) -> None:
    page.goto(f"{base}/graph?thread=waiting")
    assert page.locator("#graph-svg svg").count() == 1
    lit = page.locator('#graph-svg g.node.next[data-node="ask"]')
    assert lit.is_visible()
    assert page.locator('#graph-svg g.node.current[data-node="research"]').is_visible()
    assert page.locator("#graph-svg g.node.next").count() == 1
    _shot(page, "graph")


def test_memory_shows_charts_and_notes(page: Any, base: str) -> None:
    page.goto(f"{base}/memory")
    assert page.locator("figure.chart svg").count() == 3
    _shot(page, "memory")
    page.click("a >> text=notes / done")
    assert page.locator("li.note").count() == 3
    assert page.locator("li.note.superseded").count() == 1


def test_a_script_in_stored_data_is_inert(page: Any, base: str) -> None:
    for path in ("/threads", "/interrupts"):
        page.goto(base + path)
    page.goto(f"{base}/threads")
    page.locator("a.tid").first.click()  # the hostile thread: written last, listed first
    page.wait_for_load_state()
    assert page.locator("h1 .tid").inner_text().endswith("<U+202E>txt.exe")
    page.locator("dd a code").last.click()  # its head checkpoint
    page.wait_for_load_state()
    assert HOSTILE_TEXT in page.locator("ol.chat").inner_text()  # shown as text
    assert page.evaluate("document.querySelectorAll('main script, main img').length") == 0
    assert page.dialogs == []
    assert HOSTILE_ID.startswith("<script>")


def test_answering_an_interrupt_continues_the_thread(page: Any, base: str) -> None:
    page.goto(f"{base}/interrupts")
    _shot(page, "interrupts")
    form = page.locator("li.waiting-thread", has=page.locator("a.tid >> text=waiting"))
    form.locator("textarea[name=answer]").fill("yes")
    form.locator("button[type=submit]").click()
    page.wait_for_url(f"{base}/thread?thread=waiting&did=answered&back=interrupts")
    assert page.locator("dl.facts .status").inner_text() == "done"
    assert page.locator("#waiting").count() == 0
    said = page.locator("#did").inner_text()
    assert said.startswith("Answered and resumed: the thread is now done.")
    assert page.locator("#did a").get_attribute("href") == "/interrupts"
    page.goto(f"{base}/checkpoint?thread=waiting")
    assert "(reply sent)" in page.locator("ol.chat").inner_text()
    assert page.dialogs == []
