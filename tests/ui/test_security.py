"""The inspector's guard: token and session cookie, the Host allow-list, CSRF checks on
POST, the write routes that do not exist without ``--write``, and the headers every
response carries (whatever its status)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from statekeeper.checkpointers import open_checkpointer
from statekeeper.graphs import Runner
from statekeeper.ui import UIOptions, create_app
from statekeeper.ui.security import COOKIE, CSP, allowed_hosts_for
from tests.ui.conftest import BASE, QUESTION, REF, TOKEN, client_for

ORIGIN = BASE  # the inspector's own origin, as its pages send it


@pytest.fixture(scope="module")
def saver() -> Iterator[Any]:
    with open_checkpointer("memory://") as opened:
        Runner(opened).run(REF, QUESTION, thread_id="waiting")
        yield opened


def _app(saver: Any, *, write: bool = False) -> Any:
    return create_app(UIOptions(saver=saver, token=TOKEN, write=write, port=8765))


def _anonymous(app: Any, base: str = BASE) -> TestClient:
    return TestClient(app, base_url=base, follow_redirects=False)


# -- the token ----------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/threads", "/api/threads", "/thread?thread=waiting", "/"])
def test_without_the_token_every_page_is_refused(saver: Any, path: str) -> None:
    response = _anonymous(_app(saver)).get(path)
    assert response.status_code == 401
    assert "one-time token" in response.text
    assert "waiting" not in response.text


def test_a_wrong_token_is_refused_and_sets_no_cookie(saver: Any) -> None:
    response = _anonymous(_app(saver)).get("/threads?token=guess")
    assert response.status_code == 403
    assert "set-cookie" not in response.headers


def test_the_token_becomes_an_http_only_strict_cookie_and_leaves_the_url(saver: Any) -> None:
    client = _anonymous(_app(saver))
    response = client.get("/thread", params={"thread": "waiting", "token": TOKEN})
    assert response.status_code == 303
    assert response.headers["location"] == "/thread?thread=waiting"  # the token is gone
    cookie = response.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}=")
    assert TOKEN not in cookie  # the session is a new secret, not the token
    assert "HttpOnly" in cookie
    assert "SameSite=strict" in cookie
    assert "Path=/" in cookie
    assert client.get("/thread", params={"thread": "waiting"}).status_code == 200


def test_the_token_works_once(saver: Any) -> None:
    app = _app(saver)
    client_for(app)
    again = _anonymous(app).get(f"/threads?token={TOKEN}")
    assert again.status_code == 403
    assert "used already" in again.text


def test_a_forged_session_cookie_is_refused(saver: Any) -> None:
    app = _app(saver)
    client_for(app)
    forged = _anonymous(app)
    forged.cookies.set(COOKIE, TOKEN)
    assert forged.get("/threads").status_code == 401


def test_scripts_may_send_the_token_as_a_bearer_header(saver: Any) -> None:
    client = _anonymous(_app(saver))
    ok = client.get("/api/threads", headers={"authorization": f"Bearer {TOKEN}"})
    assert ok.status_code == 200
    assert ok.json()["threads"][0]["thread_id"] == "waiting"
    wrong = client.get("/api/threads", headers={"authorization": "Bearer nope"})
    assert wrong.status_code == 401


def test_static_files_need_no_token_but_pass_the_host_check(saver: Any) -> None:
    client = _anonymous(_app(saver))
    css = client.get("/static/style.css")
    assert css.status_code == 200
    assert css.headers["content-security-policy"] == CSP
    assert client.get("/static/htmx.min.js").status_code == 200
    evil = client.get("/static/style.css", headers={"host": "evil.example:8765"})
    assert evil.status_code == 400


# -- the Host allow-list (DNS rebinding) --------------------------------------------------


@pytest.mark.parametrize(
    "host", ["evil.example:8765", "evil.example", "127.0.0.1:9999", "127.0.0.1.evil.example:8765"]
)
def test_a_foreign_host_is_refused_even_signed_in(saver: Any, host: str) -> None:
    client = client_for(_app(saver))
    response = client.get("/api/threads", headers={"host": host})
    assert response.status_code == 400
    assert "waiting" not in response.text


@pytest.mark.parametrize("base", ["http://localhost:8765", "http://[::1]:8765", "http://127.0.0.1"])
def test_the_loopback_names_are_accepted(saver: Any, base: str) -> None:
    client = client_for(_app(saver), base=base)
    assert client.get("/api/threads").status_code == 200


def test_hosts_allowed_for_a_bound_address() -> None:
    assert allowed_hosts_for("127.0.0.1") == ("127.0.0.1", "localhost", "::1")
    assert allowed_hosts_for("192.0.2.7") == ("127.0.0.1", "localhost", "::1", "192.0.2.7")
    assert "0.0.0.0" not in allowed_hosts_for("0.0.0.0", ["box"])
    assert allowed_hosts_for("::", ["Box.Local"])[-1] == "box.local"


# -- CSRF and the write routes ------------------------------------------------------------


def _post(client: TestClient, path: str, headers: dict[str, str]) -> Any:
    form = {"thread": "waiting", "mode": "answer", "answer": "no"}
    return client.post(path, data=form, headers=headers)


@pytest.mark.parametrize(
    "headers",
    [
        {"origin": "http://evil.example"},
        {"origin": "http://127.0.0.1:9999"},
        {"origin": "null"},
        {"sec-fetch-site": "cross-site"},
        {"sec-fetch-site": "same-site"},
        {},
    ],
    ids=["other-site", "other-port", "null-origin", "cross-site", "same-site", "no-origin"],
)
def test_a_cross_origin_post_is_refused_before_anything_runs(
    saver: Any, headers: dict[str, str]
) -> None:
    client = client_for(_app(saver, write=True))
    response = _post(client, "/actions/resume", headers)
    assert response.status_code == 403
    # nothing ran: the thread still waits
    assert client.get("/api/thread", params={"thread": "waiting"}).json()["summary"]["status"] == (
        "interrupted"
    )


def test_a_same_origin_post_reaches_the_action(saver: Any) -> None:
    client = client_for(_app(saver, write=True))
    response = client.post("/actions/resume", data={"mode": "answer"}, headers={"origin": ORIGIN})
    assert response.status_code == 400  # the form lacks its thread: the action itself said so
    assert "thread field" in response.text
    for headers in (
        {"sec-fetch-site": "same-origin"},
        {"origin": "null", "sec-fetch-site": "same-origin"},
    ):
        # a browser's own form may hide its origin ("null"); Sec-Fetch-Site still tells
        fetch = client.post("/actions/resume", data={"mode": "answer"}, headers=headers)
        assert fetch.status_code == 400


@pytest.mark.parametrize("path", ["/actions/resume", "/actions/fork", "/api/actions/resume"])
def test_write_routes_do_not_exist_without_write(saver: Any, path: str) -> None:
    client = client_for(_app(saver))
    response = _post(client, path, {"origin": ORIGIN})
    assert response.status_code == 404
    assert client.get(path).status_code == 404
    assert client.get("/api/thread", params={"thread": "waiting"}).json()["summary"]["status"] == (
        "interrupted"
    )


def test_read_only_pages_offer_no_write_forms(saver: Any) -> None:
    client = client_for(_app(saver))
    for path in ("/thread?thread=waiting", "/interrupts", "/checkpoint?thread=waiting"):
        text = client.get(path).text
        assert 'method="post"' not in text
        assert "read-only" in text


def test_get_never_acts(saver: Any) -> None:
    client = client_for(_app(saver, write=True))
    response = client.get("/actions/resume", params={"thread": "waiting", "answer": "no"})
    assert response.status_code == 405


# -- headers ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "signed_in", "status"),
    [
        ("/threads", True, 200),
        ("/api/threads", True, 200),
        ("/thread?thread=nope", True, 404),
        ("/nowhere", True, 404),
        ("/threads", False, 401),
        ("/threads?token=bad", False, 403),
    ],
)
def test_every_response_carries_the_policy_headers(
    saver: Any, path: str, signed_in: bool, status: int
) -> None:
    app = _app(saver)
    client = client_for(app) if signed_in else _anonymous(app)
    response = client.get(path)
    assert response.status_code == status
    assert response.headers["content-security-policy"] == CSP
    assert "default-src 'self'" in CSP
    assert "frame-ancestors 'none'" in CSP
    assert response.headers["x-frame-options"] == "DENY"
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "same-origin"
    assert response.headers["cache-control"] == "no-store"


def test_no_cors_is_ever_granted(saver: Any) -> None:
    client = client_for(_app(saver, write=True))
    preflight = client.options(
        "/api/actions/resume",
        headers={"origin": "http://evil.example", "access-control-request-method": "POST"},
    )
    assert preflight.status_code in (403, 405)
    simple = client.get("/api/threads", headers={"origin": "http://evil.example"})
    for response in (preflight, simple):
        assert not any(name.startswith("access-control-") for name in response.headers)
