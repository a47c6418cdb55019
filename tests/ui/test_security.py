"""The inspector's guard: token and session cookie (and where the token's redirect may
point), the Host allow-list, CSRF checks on POST (the exact origin), the write routes that
do not exist without ``--write``, and the headers every response of the app carries
(whatever its status)."""

from __future__ import annotations

import http.client
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from statekeeper.checkpointers import open_checkpointer
from statekeeper.graphs import Runner
from statekeeper.ui import UIOptions, create_app
from statekeeper.ui.security import COOKIE, CSP, allowed_hosts_for
from statekeeper.ui.server import Background, bind
from tests.ui.conftest import BASE, QUESTION, REF, TOKEN, client_for

ORIGIN = BASE  # the inspector's own origin, as its pages send it


@pytest.fixture(scope="module")
def saver() -> Iterator[Any]:
    with open_checkpointer("memory://") as opened:
        Runner(opened).run(REF, QUESTION, thread_id="waiting")
        yield opened


@pytest.fixture
def writable() -> Iterator[Any]:
    """A saver of the test's own, with the thread ``waiting``: for tests that may fork."""
    with open_checkpointer("memory://") as opened:
        Runner(opened).run(REF, QUESTION, thread_id="waiting")
        yield opened


def _app(saver: Any, *, write: bool = False, port: int = 8765) -> Any:
    return create_app(UIOptions(saver=saver, token=TOKEN, write=write, port=port))


def _served(saver: Any, *, write: bool = False) -> tuple[socket.socket, Background, int]:
    """The app on a real uvicorn server (which, unlike the test client, passes a path on
    as it was sent), on a free loopback port."""
    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    return sock, Background(_app(saver, write=write, port=port), sock), port


def _exists(saver: Any, thread_id: str) -> bool:
    return (
        saver.get_tuple({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}) is not None
    )


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


@pytest.mark.parametrize(
    ("target", "location"),
    [
        ("//evil.example/x", "/evil.example/x"),  # a browser reads //host as another site
        ("///evil.example/x", "/evil.example/x"),
        ("/\\evil.example/x", "/evil.example/x"),  # ... and a backslash as a slash
        ("/\\/\\evil.example", "/evil.example"),
        ("/%2F%2Fevil.example", "/%2F%2Fevil.example"),  # escaped: stays a path
        ("/%5Cevil.example", "/%5Cevil.example"),
        ("/thread%3Fx", "/thread%3Fx"),  # an escaped "?" stays in the path
    ],
)
def test_the_token_redirect_stays_on_this_server(saver: Any, target: str, location: str) -> None:
    response = _anonymous(_app(saver)).get(f"{BASE}{target}?token={TOKEN}")
    assert response.status_code == 303
    assert response.headers["location"] == location


def test_the_token_redirect_keeps_every_other_parameter_in_order(saver: Any) -> None:
    response = _anonymous(_app(saver)).get(
        f"/memory?ns=a&token={TOKEN}&ns=b&empty=&q=a+b%26c%C3%A9&ns=a"
    )
    assert response.status_code == 303
    assert response.headers["location"] == "/memory?ns=a&ns=b&empty=&q=a+b%26c%C3%A9&ns=a"


def test_two_tokens_are_refused(saver: Any) -> None:
    response = _anonymous(_app(saver)).get(f"/threads?token={TOKEN}&token={TOKEN}")
    assert response.status_code == 403
    assert "set-cookie" not in response.headers


@pytest.mark.parametrize(
    "target",
    [
        f"//evil.example/x?token={TOKEN}&ns=a&ns=b&empty=",
        f"/\\evil.example/x?token={TOKEN}&ns=a&ns=b&empty=",
    ],
)
def test_the_served_token_redirect_stays_on_this_server(writable: Any, target: str) -> None:
    sock, server, port = _served(writable)
    with sock, server:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            connection.request("GET", target)  # the path exactly as given, as curl --path-as-is
            response = connection.getresponse()
            response.read()
        finally:
            connection.close()
    assert response.status == 303
    assert response.getheader("location") == "/evil.example/x?ns=a&ns=b&empty="


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


def _fork(client: Any, headers: dict[str, str], to: str = "copy") -> Any:
    form = {"thread": "waiting", "checkpoint": "head", "to": to}
    return client.post("/actions/fork", data=form, headers=headers)


OTHER_ORIGINS = [
    "http://localhost",  # port 80: another origin, but the same site: the cookie goes along
    "http://127.0.0.1",
    "https://localhost",
    "https://127.0.0.1:8765",  # the right host and port, the wrong scheme
    "http://localhost:8765",  # the same server under another name is another origin
    "http://127.0.0.1:8765.evil.example",
    "http://127.0.0.1:8765/",
    "http://user@127.0.0.1:8765",
    "http://[::1]:8765",
]


@pytest.mark.parametrize("origin", OTHER_ORIGINS)
def test_a_post_from_another_origin_of_the_same_site_writes_nothing(
    writable: Any, origin: str
) -> None:
    client = client_for(_app(writable, write=True))
    response = _fork(client, {"origin": origin})
    assert response.status_code == 403
    assert "cross-origin" in response.text
    assert not _exists(writable, "copy")


def test_referer_is_no_origin(writable: Any) -> None:
    """Without ``Origin``, only ``Sec-Fetch-Site`` speaks for a browser: a ``Referer``,
    even the inspector's own, is not consulted."""
    client = client_for(_app(writable, write=True))
    response = _fork(client, {"referer": f"{ORIGIN}/thread?thread=waiting"})
    assert response.status_code == 403
    assert not _exists(writable, "copy")


@pytest.mark.parametrize(
    ("base", "headers"),
    [
        (BASE, {"origin": "http://127.0.0.1:8765"}),
        ("http://localhost:8765", {"origin": "http://localhost:8765"}),
        ("http://[::1]:8765", {"origin": "http://[::1]:8765"}),
        ("http://127.0.0.1", {"origin": "http://127.0.0.1:8765"}),  # Host without its port
        (BASE, {"sec-fetch-site": "same-origin"}),  # no Origin: as the docs say
        (BASE, {"origin": "null", "sec-fetch-site": "same-origin"}),
    ],
)
def test_a_post_from_the_exact_own_origin_writes(
    writable: Any, base: str, headers: dict[str, str]
) -> None:
    client = client_for(_app(writable, write=True), base=base)
    response = _fork(client, headers)
    assert response.status_code == 303
    assert _exists(writable, "copy")


@pytest.mark.parametrize("headers", [{}, {"origin": "http://localhost"}])
def test_a_bearer_post_needs_no_origin(writable: Any, headers: dict[str, str]) -> None:
    """A page cannot send ``Authorization`` to another origin (that takes a CORS preflight,
    never granted), so a request that carries the token is a script's, from anywhere."""
    client = _anonymous(_app(writable, write=True))
    response = client.post(
        "/api/actions/fork",
        json={"thread": "waiting", "checkpoint": "head", "to": "copy"},
        headers={**headers, "authorization": f"Bearer {TOKEN}"},
    )
    assert response.status_code == 200
    assert _exists(writable, "copy")


def test_a_served_post_needs_its_exact_origin(writable: Any) -> None:
    sock, server, port = _served(writable, write=True)
    own = f"http://127.0.0.1:{port}"
    with sock, server, httpx.Client(base_url=own, timeout=10) as browser:
        assert browser.get(f"/?token={TOKEN}").status_code == 303  # the session cookie
        for origin in (
            "http://localhost",
            "http://127.0.0.1",
            "https://localhost",
            f"https://127.0.0.1:{port}",
        ):
            assert _fork(browser, {"origin": origin}).status_code == 403, origin
        assert not _exists(writable, "copy")
        assert _fork(browser, {"origin": own}).status_code == 303
    assert _exists(writable, "copy")


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


@pytest.mark.parametrize(
    "request_bytes",
    [b"GARBAGE\r\n\r\n", b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n"],
)
def test_a_request_the_parser_rejects_gets_a_bare_400(saver: Any, request_bytes: bytes) -> None:
    """It never reaches the app, so it carries none of the app's headers (docs/ui.md says
    so): nothing but a fixed line of text."""
    sock, server, port = _served(saver)
    with sock, server, socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        raw.sendall(request_bytes)
        answer = b""
        while chunk := raw.recv(4096):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 ")
    assert b"text/plain" in head.lower()
    assert body == b"Invalid HTTP request received."
