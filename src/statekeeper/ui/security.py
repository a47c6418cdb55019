"""What stands between the inspector and anything that is not its user's browser.

The inspector shows private conversations and, with ``--write``, can resume and fork
threads, on a port any local process and any web page the user visits can reach. So every
request passes through :class:`Guard`, an ASGI middleware, in this order:

1. **Host allow-list** (DNS rebinding): a page on ``evil.example`` whose name resolves to
   127.0.0.1 reaches the port with ``Host: evil.example``; anything but the names the
   server was started for is refused (400).
2. **Token**: the URL printed at start carries a one-time token. The first request that
   presents it gets a session cookie (``HttpOnly``, ``SameSite=Strict``, path ``/``) and a
   redirect to the same page without the token (a path on this server, whatever the
   request's path looked like; every other query parameter kept), so the token leaves the
   address bar and history; the token is then spent. Scripts send ``Authorization:
   Bearer TOKEN`` instead (no page can set that header on a cross-origin request without
   a CORS preflight, which is never granted). Anything else is refused (401), except the
   vendored static files.
3. **CSRF**: a request that is not GET or HEAD must come from the inspector's own pages:
   its ``Origin`` must be exactly the inspector's origin (scheme, host name and port, as
   the request reached it), or, when a client sends no ``Origin`` or ``Origin: null``,
   ``Sec-Fetch-Site`` must be ``same-origin``; anything else is refused (403), unless it
   authenticates with the ``Authorization`` header (which a browser never sends on its
   own). ``Referer`` is never consulted.
4. **Headers** on every response the application sends: ``Content-Security-Policy``
   (``default-src 'self'``: no inline script, no third-party resource, no framing),
   ``X-Frame-Options: DENY``, ``X-Content-Type-Options: nosniff``,
   ``Referrer-Policy: same-origin``, ``Cache-Control: no-store``. No CORS header is ever
   sent. (A request uvicorn's HTTP parser rejects never reaches the application: it gets
   uvicorn's own bare 400.)
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from http.cookies import SimpleCookie
from urllib.parse import parse_qsl, quote, urlencode

from starlette.datastructures import Headers, MutableHeaders
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = [
    "COOKIE",
    "CSP",
    "LOOPBACK_HOSTS",
    "SECURITY_HEADERS",
    "Guard",
    "GuardSettings",
    "allowed_hosts_for",
    "new_token",
]

COOKIE = "statekeeper_ui"
CSP = (
    "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'; "
    "object-src 'none'"
)
SECURITY_HEADERS = {
    "content-security-policy": CSP,
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",  # no-referrer would make forms send Origin: null
    "cache-control": "no-store",
    "cross-origin-opener-policy": "same-origin",
    "cross-origin-resource-policy": "same-origin",
}
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
_PUBLIC = ("/static/",)  # vendored assets: nothing private, needed by the refusal page
_SAFE_METHODS = ("GET", "HEAD")
_DEFAULT_PORTS = {"http": 80, "https": 443}  # the port an origin leaves out
# a path's characters a redirect keeps as they are: RFC 3986 pchar, "/" and escapes;
# anything else (a backslash, "#", a space, a control character) is %-escaped
_PATH_SAFE = "/%:@!$&'()*+,;=-._~"


def new_token() -> str:
    """A fresh random token for the start URL (256 bits)."""
    return secrets.token_urlsafe(32)


@dataclass(frozen=True)
class GuardSettings:
    """What :class:`Guard` checks against: the start ``token``, the host names the
    server answers to (``allowed_hosts``, compared without the port) and its ``port``
    (a ``Host`` naming another port is refused; ``None``: any). The ``Origin`` of a
    write must name the ``Host``'s port, or, when the ``Host`` names none, this one."""

    token: str
    allowed_hosts: tuple[str, ...] = LOOPBACK_HOSTS
    port: int | None = None


class Guard:
    """The ASGI middleware described in the module docstring."""

    def __init__(self, app: ASGIApp, settings: GuardSettings) -> None:
        self._app = app
        self._settings = settings
        self._hosts = {_bare(host) for host in settings.allowed_hosts}
        self._token: str | None = settings.token  # None once spent
        self._sessions: set[str] = set()
        self._lock = threading.Lock()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers[name] = value
            await send(message)

        refusal = self._check(scope)
        if refusal is not None:
            await refusal(scope, receive, send_with_headers)
            return
        await self._app(scope, receive, send_with_headers)

    # -- the checks ------------------------------------------------------------------------

    def _check(self, scope: Scope) -> Response | None:
        headers = Headers(scope=scope)
        if not self._host_allowed(headers.get("host", "")):
            return _refuse(400, "this server answers only to its own host name")
        path: str = scope["path"]
        if path.startswith(_PUBLIC) and scope["method"] in _SAFE_METHODS:
            return None
        # a list, not a dict: repeated and empty parameters are the page's (?ns=a&ns=b)
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        if any(name == "token" for name, _ in query):
            return self._exchange(scope, query)
        bearer = self._bearer(headers)
        if not (bearer or self._has_session(headers)):
            return _refuse(
                401,
                "not signed in: open the URL `statekeeper ui` printed (it carries a "
                "one-time token); restart it for a new one",
            )
        if scope["method"] not in _SAFE_METHODS and not bearer:
            return self._cross_site(scope, headers)
        return None

    def _host_allowed(self, host: str) -> bool:
        name, port = _split_host(host)
        if name not in self._hosts:
            return False
        return port is None or self._settings.port is None or port == self._settings.port

    def _exchange(self, scope: Scope, query: list[tuple[str, str]]) -> Response:
        """Trade the one-time token (exactly one ``token`` parameter) for a session cookie,
        and redirect to :func:`_same_page` without it."""
        tokens = [value for name, value in query if name == "token"]
        given = tokens[0] if len(tokens) == 1 else ""  # two tokens: which? neither
        with self._lock:
            valid = self._token is not None and hmac.compare_digest(
                given.encode(), self._token.encode()
            )
            if valid:
                self._token = None
                session = secrets.token_urlsafe(32)
                self._sessions.add(session)
        if not valid:
            return _refuse(
                403,
                "this link's token is wrong or was used already: restart `statekeeper ui` "
                "for a new link",
            )
        kept = [(name, value) for name, value in query if name != "token"]
        response = RedirectResponse(_same_page(scope, kept), status_code=303)
        response.set_cookie(COOKIE, session, httponly=True, samesite="strict", path="/")
        return response

    def _has_session(self, headers: Headers) -> bool:
        cookie = SimpleCookie()
        try:
            cookie.load(headers.get("cookie", ""))
        except Exception:  # a malformed Cookie header is no session
            return False
        morsel = cookie.get(COOKIE)
        if morsel is None:
            return False
        with self._lock:
            return any(_same(morsel.value, session) for session in self._sessions)

    def _bearer(self, headers: Headers) -> bool:
        scheme, _, given = headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and _same(given.strip(), self._settings.token)

    def _cross_site(self, scope: Scope, headers: Headers) -> Response | None:
        """``None`` if a browser says the request comes from the inspector's own pages: its
        ``Origin`` is exactly :meth:`_own_origin`, or, with no ``Origin`` (or ``null``),
        ``Sec-Fetch-Site`` is ``same-origin``. Otherwise the 403 that refuses it."""
        origin = headers.get("origin")
        # "null": a browser hides the origin (a sandboxed frame, a redirect across sites,
        # a page whose referrer policy is no-referrer): only Sec-Fetch-Site can tell then
        if origin is not None and origin != "null":
            # the whole origin, not just an allowed name: http://localhost (port 80) and
            # https://127.0.0.1:PORT are other origins of the same *site*, so a browser
            # sends the SameSite=Strict cookie along with their pages' requests
            if origin.lower() == self._own_origin(scope, headers):
                return None
            return _refuse(403, f"refused a cross-origin request from {origin[:100]!r}")
        if headers.get("sec-fetch-site") == "same-origin":
            return None
        return _refuse(403, "refused a request that does not say it comes from this page")

    def _own_origin(self, scope: Scope, headers: Headers) -> str:
        """The inspector's origin as a browser writes it in ``Origin`` for the page the
        request was sent from: the scheme the request came on (``http``: the server
        never speaks TLS), the ``Host`` name (already checked) and port (the ``Host``'s,
        else the server's; left out when it is the scheme's default, as browsers do)."""
        scheme: str = scope.get("scheme", "http")
        name, port = _split_host(headers.get("host", ""))
        if port is None:
            port = self._settings.port
        host = f"[{name}]" if ":" in name else name
        if port is None or port == _DEFAULT_PORTS.get(scheme):
            return f"{scheme}://{host}"
        return f"{scheme}://{host}:{port}"


def _same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode(), expected.encode())


def _refuse(status: int, reason: str) -> Response:
    return PlainTextResponse(f"{status}: {reason}\n", status_code=status)


def _same_page(scope: Scope, query: list[tuple[str, str]]) -> str:
    """Where the token exchange redirects: the request's path, always on this server, with
    ``query`` (in order, repeats and empty values included).

    The path is the raw one, as sent, so an escaped ``%2F`` stays escaped; leading slashes
    and backslashes collapse into one ``/``, since a browser reads ``//evil.example/x``
    (and ``/\\evil.example``, a backslash being a slash to it) as another site's address;
    what is left is escaped, so no character a browser drops (a tab) or ends the path
    with (``#``) gets through either."""
    raw: bytes = scope.get("raw_path") or quote(scope["path"]).encode()
    path = "/" + quote(raw.lstrip(b"/\\"), safe=_PATH_SAFE)
    return path + (f"?{urlencode(query)}" if query else "")


def _split_host(host: str) -> tuple[str, int | None]:
    """``"[::1]:8000"`` → ``("::1", 8000)``; ``"localhost"`` → ``("localhost", None)``;
    an unparseable port, or anything after ``]`` but a port, makes the name unmatchable."""
    host = host.strip().lower()
    if host.startswith("["):
        name, _, rest = host[1:].partition("]")
        if rest and not rest.startswith(":"):
            return "", None
        port_text = rest[1:]
    elif host.count(":") == 1:
        name, _, port_text = host.partition(":")
    else:
        name, port_text = host, ""
    if not port_text:
        return name, None
    return (name, int(port_text)) if port_text.isascii() and port_text.isdigit() else ("", None)


def _bare(host: str) -> str:
    """A host name as compared: lower case, IPv6 without brackets, no port."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].partition("]")[0]
    return host


def allowed_hosts_for(bind: str, extra: Iterable[str] = ()) -> tuple[str, ...]:
    """The host names to accept for a server bound to ``bind``: the loopback names, the
    bound address itself unless it is a wildcard (then the names must be in ``extra``),
    and ``extra``."""
    names = [*LOOPBACK_HOSTS]
    if not _wildcard(bind):
        names.append(bind)
    names.extend(extra)
    return tuple(dict.fromkeys(_bare(name) for name in names))


def _wildcard(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.strip("[]")).is_unspecified
    except ValueError:  # a host name
        return False
