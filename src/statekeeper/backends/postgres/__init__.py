"""PostgreSQL: ``postgres://user@host:port/dbname?schema=NAME`` (or ``postgresql://``).

The checkpointer and the memory store may share one database and one schema: each records
its own migrations there (:mod:`._database`). Only this package imports ``psycopg``.

A URL is a libpq connection URI plus statekeeper's own options. Query options that libpq
knows (``sslmode``, ``sslrootcert``, ``application_name``, ``connect_timeout``,
``options``, ``target_session_attrs``, ``keepalives``...) go to libpq unchanged; the
others are the backend's (:data:`POOL_OPTIONS`, plus each class's own). A URL must name
a host, and its ports must be numbers (:func:`_check_hosts`); a first connection that
fails is told in one line by :func:`connect_error`.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

from statekeeper.errors import (
    ConfigurationError,
    InvalidIdError,
    StatekeeperError,
    StorageError,
)
from statekeeper.urls import StorageURL, check_option, redact

if TYPE_CHECKING:
    import psycopg_pool

__all__ = [
    "CHECK_AFTER_IDLE",
    "INDEX_ENTRY_BYTES",
    "MAX_TIMEOUT",
    "NEVER_INDEXED",
    "POOL_OPTIONS",
    "Connection",
    "Freshness",
    "LoopPool",
    "check_key",
    "connect_error",
    "decode_id",
    "encode_id",
    "keep_open",
    "release",
    "split_options",
]

# The options of the connection pools (keyword arguments or URL query options).
POOL_OPTIONS: dict[str, type] = {
    "schema": str,
    "mode": str,
    "pool_min_size": int,
    "pool_max_size": int,
    "pool_timeout": float,
    "pool_check": bool,
    "retries": int,
}
# The longest pool_timeout: it is also the migration's lock_timeout, which PostgreSQL
# takes in milliseconds up to 2**31 - 1.
MAX_TIMEOUT = (2**31 - 1) // 1000
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]{0,62}")


@dataclass(frozen=True)
class Connection:
    """Where and how to connect: the libpq connection string (without statekeeper's
    options), the schema the tables live in, and the pool's settings.

    ``retries``: how many times an operation that failed because the connection was
    lost is run again on a new connection (0: never). ``pool_check``: a connection idle
    for a second or more is checked (one empty query) when it leaves the pool, so one
    the server dropped while idle is replaced before it is used. ``pool_timeout``:
    seconds to wait for a connection, and, when opening, for the schema's migration
    lock."""

    conninfo: str
    display: str  # the URL without its password, for messages
    schema: str = "statekeeper"
    mode: str = "rw"
    pool_min_size: int = 1
    pool_max_size: int = 10
    pool_timeout: float = 30.0
    pool_check: bool = True
    retries: int = 1

    @classmethod
    def from_url(cls, url: StorageURL, options: Mapping[str, Any]) -> Connection:
        """The connection a URL names, with the pool ``options`` (already merged from the
        URL's query and keywords; see :func:`split_options`).

        Raises:
            ConfigurationError: the URL names no host, or a port that is not a number
                from 1 to 65535 (see :func:`_check_hosts`), or a bad option.
        """
        parts = urlsplit(url.raw)
        libpq = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k in LIBPQ]
        _check_hosts(parts.netloc, dict(libpq), redact(url.raw))
        # %20 for a space: libpq reads "+" in a URI as a plus sign, not as a space
        query = urlencode(libpq, quote_via=quote)
        conninfo = parts._replace(scheme="postgresql", query=query).geturl()
        if not parts.netloc:  # postgresql:///db?host=/run/postgresql: geturl drops the "//"
            conninfo = "postgresql://" + conninfo.removeprefix("postgresql:")
        made = cls(conninfo, redact(url.raw).split("?", 1)[0], **dict(options))
        made.check()
        return made

    def check(self) -> None:
        """Raise :class:`ConfigurationError` for a bad schema name or pool setting."""
        for name, kind in POOL_OPTIONS.items():
            check_option(name, kind, getattr(self, name))
        if not isinstance(self.schema, str) or not _IDENTIFIER.fullmatch(self.schema):
            raise ConfigurationError(
                "schema must be a name of letters, digits, _, . and - that starts with a "
                f"letter or _, at most 63 characters, got {self.schema!r}"
            )
        if self.mode not in ("rw", "ro"):
            raise ConfigurationError(f"mode must be one of rw, ro, got {self.mode!r}")
        if not self.pool_max_size > 0 or not 0 <= self.pool_min_size <= self.pool_max_size:
            raise ConfigurationError(
                "pool sizes must satisfy 0 <= pool_min_size <= pool_max_size and "
                f"pool_max_size >= 1, got {self.pool_min_size} and {self.pool_max_size}"
            )
        if not 0 < self.pool_timeout <= MAX_TIMEOUT or not 0 <= self.retries <= 10:
            raise ConfigurationError(
                f"pool_timeout must be > 0 seconds (at most {MAX_TIMEOUT:,}) and retries "
                f"between 0 and 10, got {self.pool_timeout!r} and {self.retries!r}"
            )

    @property
    def read_only(self) -> bool:
        return self.mode == "ro"


# libpq's connection parameters: passed through from a URL's query as they are.
LIBPQ = frozenset(
    """service user password passfile channel_binding connect_timeout dbname host hostaddr
    port client_encoding options application_name fallback_application_name keepalives
    keepalives_idle keepalives_interval keepalives_count tcp_user_timeout sslmode
    sslnegotiation sslcompression sslcert sslkey sslcertmode sslpassword sslrootcert sslcrl
    sslcrldir sslsni requirepeer require_auth min_protocol_version max_protocol_version
    ssl_min_protocol_version ssl_max_protocol_version gssencmode krbsrvname gsslib
    gssdelegation target_session_attrs load_balance_hosts""".split()  # noqa: SIM905
)


def _check_hosts(netloc: str, libpq: Mapping[str, str], shown: str) -> None:
    """Refuse, at once, a URL libpq could not connect with the way it was meant.

    A host is required: in the authority (``host[:port]``, several separated by commas,
    ``[v6 address]``), or as libpq's ``host``, ``hostaddr`` or ``service`` option
    (``postgresql:///db?host=/run/postgresql`` for a Unix socket). Without one, libpq
    would pick the host from the environment or a Unix socket, which a URL copied from
    the SQLite form (``postgresql:///db``) never meant. Each port given must be a number
    from 1 to 65535. The port, user, password and database may be left out: libpq's
    defaults apply (5432, the login name, ``PGPASSWORD`` or ``.pgpass``, a database
    named as the user).

    Raises:
        ConfigurationError: no host, or a bad port (``shown``: the URL, redacted).
    """
    authority = netloc.rpartition("@")[2]
    hosts: list[str] = []
    ports = [p for p in libpq.get("port", "").split(",") if p]
    for each in authority.split(",") if authority else ():
        if each.startswith("["):  # [v6 address][:port]
            host, _, port = each[1:].partition("]")
            port = port.removeprefix(":")
        else:
            host, _, port = each.partition(":")
        hosts.append(host)
        ports += [port] if port else []
    if not all(p.isascii() and p.isdigit() and 0 < int(p) < 65536 for p in ports):
        raise ConfigurationError(
            f"bad port in PostgreSQL URL {shown!r}: a port is a number from 1 to 65535"
        )
    if not any(hosts) and not any(libpq.get(k) for k in ("host", "hostaddr", "service")):
        raise ConfigurationError(
            f"PostgreSQL URL {shown!r} names no host; write postgresql://HOST[:PORT]/DATABASE"
            " (a Unix socket: postgresql:///DATABASE?host=/run/postgresql)"
        )


# What a failed connection said, matched on libpq's and the server's English messages
# (another lc_messages gets the last row), and what to do. The first three are mistakes
# in the URL or in the server's setup that retrying for pool_timeout cannot fix.
_FAILURES: tuple[tuple[str, type[StatekeeperError], str], ...] = (
    (
        r"database .* does not exist",
        ConfigurationError,
        "create it (createdb NAME) or name an existing database in the URL",
    ),
    (
        r"role .* does not exist|authentication failed|password|pg_hba\.conf",
        ConfigurationError,
        "check the user and password (in the URL, PGPASSWORD or ~/.pgpass) and that the "
        "server lets that user connect to that database (pg_hba.conf)",
    ),
    (
        r"SSL|TLS|certificate|sslmode",
        ConfigurationError,
        "make the URL's sslmode (and sslrootcert, sslcert, sslkey) match the server's TLS "
        "setup: a server without TLS needs sslmode=prefer or disable",
    ),
    (
        r"",  # anything else: refused, timed out, unknown host name
        StorageError,
        "check that the server is up and accepts connections at that host and port",
    ),
)
# what libpq puts before the reason: "connection failed: connection to server at
# "127.0.0.1", port 1 failed: FATAL:  database "x" does not exist"
_PREFIX = re.compile(
    r"^(connection (failed|is bad): )?(connection to server .*? failed: )?((FATAL|ERROR): +)?"
)


def connect_error(connection: Connection, exc: Exception) -> StatekeeperError:
    """Why connecting to ``connection`` failed, in one line: where (the URL without its
    password), what libpq or the server said, and what to do. A
    :class:`~statekeeper.errors.ConfigurationError` for a database or role that does not
    exist, a refused password and a TLS mismatch (no retry fixes those), else a
    :class:`~statekeeper.errors.StorageError` (a server down or out of reach)."""
    lines = str(exc).strip().splitlines()
    said = _PREFIX.sub("", lines[0]).strip() if lines else ""
    kind, advice = next((k, a) for p, k, a in _FAILURES if re.search(p, said))
    reason = said or type(exc).__name__
    return kind(f"cannot connect to PostgreSQL at {connection.display}: {reason}; {advice}")


def split_options(url: StorageURL) -> dict[str, str]:
    """A URL's query options without libpq's (those travel in the connection string)."""
    return {k: v for k, v in url.options.items() if k not in LIBPQ}


# -- ids as stored ----------------------------------------------------------------------
# PostgreSQL text cannot hold NUL, and ids may. Stored ids use an order-preserving code:
# U+0000 -> U+0001 U+0001, U+0001 -> U+0001 U+0002, every other character as itself. It is
# prefix-free and monotone per character, so stored ids sort (COLLATE "C": by code
# point) exactly as the ids do, and every id without those two characters is stored
# as it is.

_ESCAPED = re.compile("\x01(.)", re.DOTALL)


def encode_id(value: str) -> str:
    """An id as stored (see above)."""
    if "\x00" in value or "\x01" in value:
        return value.replace("\x01", "\x01\x02").replace("\x00", "\x01\x01")
    return value


def decode_id(value: str) -> str:
    """The id a stored id stands for; inverse of :func:`encode_id`."""
    if "\x01" in value:
        return _ESCAPED.sub(lambda m: "\x00" if m[1] == "\x01" else "\x01", value)
    return value


# -- ids too long to index -----------------------------------------------------------------
# Every stored id is part of a btree index entry, several to an entry (a pending write's
# key is its thread id, namespace, checkpoint id and task id), and an entry holds at most
# INDEX_ENTRY_BYTES once the server compressed its long values: it refuses a larger one
# (SQLSTATE 54000, "index row size ... exceeds btree version 4 maximum 2704"), which
# Database.error reports as an InvalidIdError, never retried. Ids of up to about 2600
# bytes in all always fit; repetitive ones fit far beyond (10,000 times "x" does). No
# compression packs more than 255 bytes into one (LZ4's best; pglz's is under 100), so
# ids totalling more than NEVER_INDEXED never fit: those are refused before anything is
# sent.
INDEX_ENTRY_BYTES = 2704
NEVER_INDEXED = INDEX_ENTRY_BYTES * 255


def check_key(what: str, *ids: str) -> None:
    """Raise :class:`InvalidIdError` if ``ids``, those of one index entry (``what``:
    what they are, for the message), total more than :data:`NEVER_INDEXED` bytes as
    stored: more than PostgreSQL can index, whatever they hold."""
    if sum(map(len, ids)) * 4 <= NEVER_INDEXED:  # at most 4 bytes a character, as stored
        return
    size = sum(len(encode_id(each).encode()) for each in ids)
    if size > NEVER_INDEXED:
        raise InvalidIdError(
            f"{what} {'is' if len(ids) == 1 else 'are'} {size:,} bytes (UTF-8), more than "
            f"PostgreSQL can index: an index entry holds {INDEX_ENTRY_BYTES} bytes once "
            f"compressed, never more than {NEVER_INDEXED:,} bytes of ids; use shorter ids"
        )


# -- the pools' connections (used by ._database) ------------------------------------

# A connection alive this recently is handed out unchecked: the connections a server
# drops without a word (idle timeouts, proxies) have been idle far longer, and a lost
# connection drains the whole pool (Database.run).
CHECK_AFTER_IDLE = 1.0


class Freshness:
    """Which pooled connections ``pool_check`` checks (one empty query, a round trip)
    before use: those not known alive for :data:`CHECK_AFTER_IDLE` seconds. A check on
    every hand-out would cost a round trip per operation, a third of a small put."""

    def __init__(self) -> None:
        self._alive: weakref.WeakKeyDictionary[object, float] = weakref.WeakKeyDictionary()

    def alive(self, conn: object) -> None:
        """``conn`` just connected, or finished an operation."""
        self._alive[conn] = time.monotonic()

    def needs_check(self, conn: object) -> bool:
        alive = self._alive.get(conn)
        return alive is None or time.monotonic() - alive >= CHECK_AFTER_IDLE


@dataclass(frozen=True)
class LoopPool:
    """The asyncio pool of one event loop and the task on that loop that closes it."""

    loop: asyncio.AbstractEventLoop
    pool: psycopg_pool.AsyncConnectionPool
    keeper: asyncio.Task[None]


async def keep_open(pool: psycopg_pool.AsyncConnectionPool) -> None:
    """Keep ``pool`` open until this task is cancelled (by :func:`release`, or by the
    loop's end: ``asyncio.run`` cancels every task left and waits for them), then close it:
    psycopg_pool's workers catch ``CancelledError``, and one cancelled while it connects
    schedules a retry and waits for its next job, so the loop's end would wait forever.
    ``close`` gives each worker its stop job before it first waits."""
    try:
        await asyncio.get_running_loop().create_future()  # done only by cancellation
    finally:
        _finish(pool)  # now: a second cancellation (the loop ending) may cut close short
        await pool.close()


def release(kept: LoopPool) -> None:
    """Have ``kept`` closed on its loop (thread-safe), its idle connections here if stopped."""
    with contextlib.suppress(RuntimeError):  # the loop is closed: its tasks are over
        kept.loop.call_soon_threadsafe(kept.keeper.cancel)
    if not kept.loop.is_running():
        _finish(kept.pool)


def _finish(pool: psycopg_pool.AsyncConnectionPool) -> None:
    """Close the idle connections of ``pool`` without awaiting (``close`` skips them)."""
    for conn in list(getattr(pool, "_pool", ())):
        with contextlib.suppress(Exception):
            conn.pgconn.finish()
