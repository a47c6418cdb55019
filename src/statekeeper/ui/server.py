"""Serving the inspector with uvicorn: bind first (so the port, and so the URL and the
``Host`` allow-list, are known before the app is built), then serve on that socket,
in the foreground (``statekeeper ui``) or in a background thread (tests, notebooks).
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from types import TracebackType
from typing import Any

import uvicorn
from starlette.types import ASGIApp

__all__ = ["Background", "bind", "serve", "start_url"]

_START_TIMEOUT = 10.0


def bind(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host`` and ``port`` (0: any free port), not yet listening.

    Raises:
        OSError: the address is taken or cannot be bound.
    """
    family = socket.AF_INET6 if _is_ipv6(host) else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
    except OSError:
        sock.close()
        raise
    return sock


def _is_ipv6(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).version == 6
    except ValueError:  # a name: IPv4, as "localhost" usually resolves first
        return False


def start_url(sock: socket.socket, token: str) -> str:
    """The URL that signs a browser in: the bound address (loopback when bound to every
    interface) with the one-time ``token``."""
    host, port = sock.getsockname()[:2]
    if ipaddress.ip_address(host).is_unspecified:
        host = "127.0.0.1" if sock.family == socket.AF_INET else "::1"
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/?token={token}"


def _server(app: ASGIApp) -> uvicorn.Server:
    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,  # URLs name threads: private
        lifespan="off",
        server_header=False,
        proxy_headers=False,  # nothing is in front of a local tool
    )
    return uvicorn.Server(config)


def serve(app: ASGIApp, sock: socket.socket) -> None:
    """Serve ``app`` on ``sock`` until Ctrl-C (SIGINT) or SIGTERM."""
    _server(app).run(sockets=[sock])


class Background:
    """``app`` served on ``sock`` from a daemon thread, for as long as a ``with`` block
    (or until :meth:`stop`)."""

    def __init__(self, app: ASGIApp, sock: socket.socket) -> None:
        self._server = _server(app)
        self._sock = sock
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, daemon=True
        )

    def start(self) -> None:
        """Start serving; return once the server accepts connections.

        Raises:
            RuntimeError: it did not start within 10 seconds.
        """
        self._thread.start()
        deadline = time.monotonic() + _START_TIMEOUT
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the inspector's server did not start")
            time.sleep(0.02)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(_START_TIMEOUT)

    def __enter__(self) -> Background:
        self.start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | Any) -> None:
        self.stop()
