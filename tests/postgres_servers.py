"""The PostgreSQL server of the test suite: found once per session, never faked.

``POSTGRES_URL`` if set, else the local server at 127.0.0.1:5432 (user ``postgres``, the
``postgres`` database) if it answers. Every URL handed out names a fresh schema
(``?schema=t_<hex>``), so tests never see each other's tables; :meth:`PostgresServer.cleanup`
drops a URL's schema, and the session drops any left. Without a server the tests are
skipped with a reason -- except on CI (``CI=true``), where they fail: a PostgreSQL test is
never silently skipped there.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from types import TracebackType
from urllib.parse import parse_qs, urlsplit

import psycopg
import pytest
from psycopg import sql

ON_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


def answers(url: str) -> str | None:
    """``None`` if a server answers at ``url``, else why not."""
    try:
        with psycopg.connect(url, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return str(exc).strip() or type(exc).__name__
    return None


def unavailable(reason: str) -> None:
    """Fail on CI, skip elsewhere."""
    if ON_CI:
        pytest.fail(f"CI=true and {reason}: PostgreSQL tests must run on CI", pytrace=False)
    pytest.skip(reason)


@dataclass
class PostgresServer:
    """The session's server (see the module docstring)."""

    schemas: dict[str, str] = field(default_factory=dict)  # schema -> base URL
    _base: str | None = None
    _failure: str | None = None

    def base(self) -> str:
        """The server's URL (no schema); skips (fails on CI) when none answers."""
        if self._base is None and self._failure is None:
            url = os.environ.get("POSTGRES_URL") or DEFAULT_URL
            self._failure = answers(url)
            if self._failure is None:
                self._base = url
        if self._base is None:
            unavailable(f"no PostgreSQL server answers ({self._failure})")
        assert self._base is not None
        return self._base

    def url(self, scheme: str = "postgres") -> str:
        """A URL naming a fresh schema on the server."""
        base = self.base()
        schema = f"t_{uuid.uuid4().hex}"
        self.schemas[schema] = base
        parts = urlsplit(base)
        query = f"{parts.query}&schema={schema}" if parts.query else f"schema={schema}"
        return parts._replace(scheme=scheme, query=query).geturl()

    def cleanup(self, url: str) -> None:
        """Drop the schema ``url`` names."""
        schema = parse_qs(urlsplit(url).query)["schema"][0].split(".", 1)[0]
        base = self.schemas.pop(schema, None)
        if base is not None:
            drop_schema(base, schema)

    def stop(self) -> None:
        for schema, base in list(self.schemas.items()):
            with contextlib.suppress(psycopg.Error):
                drop_schema(base, schema)
        self.schemas.clear()


def connect(url: str) -> psycopg.Connection[tuple[object, ...]]:
    """A plain autocommit connection to the server of ``url`` (statekeeper's options
    left out)."""
    parts = urlsplit(url)
    return psycopg.connect(parts._replace(scheme="postgresql", query="").geturl(), autocommit=True)


def drop_schema(base: str, schema: str) -> None:
    """Drop a test schema, and those that extend its name (``t_<hex>.failed``), with
    everything in them."""
    assert schema.startswith("t_"), schema
    assert schema[2:].isalnum(), schema
    with connect(base) as conn:
        names = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname = %s OR nspname LIKE %s",
            (schema, schema + ".%"),
        ).fetchall()
        for (name,) in names:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


class Relay:
    """A TCP relay in front of the server of ``url``: the network between a client and
    the real server, made slow on demand. It forwards every connection until
    :meth:`hold`; after that, past the next ``passing`` ones, a connection is accepted and
    left unanswered (the client waits in its handshake, as with a server slow to accept)
    until the relay closes. ``accepted`` counts the connections made through it."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self._server = (parts.hostname or "127.0.0.1", parts.port or 5432)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)  # so the accepting thread sees close()
        self.port: int = self._listener.getsockname()[1]
        self.accepted = 0
        self._passing: int | None = None  # None: every connection passes
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name="relay").start()

    def url(self, url: str) -> str:
        """``url`` (same user, database and options) through the relay."""
        parts = urlsplit(url)
        user = parts.netloc.rpartition("@")[0]
        return parts._replace(
            netloc=f"{user}@127.0.0.1:{self.port}" if user else f"127.0.0.1:{self.port}"
        ).geturl()

    def hold(self, passing: int = 0) -> None:
        """From now on, forward ``passing`` more connections and hold the others."""
        with self._lock:
            self._passing = passing

    def wait_for(self, count: int, timeout: float = 30) -> None:
        """Wait until ``count`` connections were made through the relay."""
        deadline = time.monotonic() + timeout
        while self.accepted < count:
            assert time.monotonic() < deadline, f"{self.accepted} connections, not {count}"
            time.sleep(0.01)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self.accepted += 1
                self._sockets.append(client)
                held = self._passing == 0
                if self._passing:
                    self._passing -= 1
            if held:
                continue
            server = socket.create_connection(self._server)
            with self._lock:
                self._sockets.append(server)
            for source, target in ((client, server), (server, client)):
                threading.Thread(target=_pump, args=(source, target), daemon=True).start()

    def close(self) -> None:
        """Stop accepting, and end every connection (held or forwarded)."""
        self._closed = True
        self._listener.close()
        with self._lock:
            for each in self._sockets:
                with contextlib.suppress(OSError):
                    each.shutdown(socket.SHUT_RDWR)  # wakes the threads reading it
                each.close()

    def __enter__(self) -> Relay:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _pump(source: socket.socket, target: socket.socket) -> None:
    """Copy what ``source`` sends to ``target`` until either side ends."""
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            target.sendall(data)
    with contextlib.suppress(OSError):
        target.shutdown(socket.SHUT_WR)


POSTGRES = PostgresServer()
