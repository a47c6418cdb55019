"""Redis plumbing shared by every statekeeper component that stores data in Redis.

* :class:`RedisTarget` turns a ``redis://``, ``rediss://``, ``redis+cluster://`` or
  ``rediss+cluster://`` URL into clients: synchronous and asyncio, standalone or Cluster,
  with retries and exponential backoff on dropped connections and timeouts, and turns
  driver errors into :class:`~statekeeper.errors.StorageError` naming the URL (with its
  password redacted), the driver's exception chained as ``__cause__``.
* Key encoding: :func:`tag` makes any id safe inside a key and its hash tag, and
  :func:`ordered` makes ids sortable and concatenable inside members and fields;
  :func:`pack` frames byte strings simply enough for Lua scripts to read them.

:mod:`statekeeper.backends.redis._io` runs operations over these clients. Only the Redis modules
import these modules, and importing them is what imports ``redis``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Self
from urllib.parse import quote, unquote, urlsplit

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.retry
import redis.cluster
import redis.exceptions
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from statekeeper.errors import ConfigurationError, ReadOnlyError, StorageError
from statekeeper.urls import StorageURL, parse_url, redact

__all__ = [
    "ASYNC_CONNECTIONS",
    "ASYNC_IO",
    "CLAIM_TTL",
    "DRIVER_ERRORS",
    "SCHEMES",
    "RedisCheckpointerOptions",
    "RedisOptions",
    "RedisTarget",
    "asend",
    "check_prefix",
    "ordered",
    "pack",
    "packed",
    "send",
    "split_ordered",
    "tag",
    "unpack",
    "untag",
]

SCHEMES = ("redis", "rediss", "redis+cluster", "rediss+cluster")
# no braces (hash tags) and no glob characters, so a prefix never changes a key's slot
# and a pattern built from it matches only its own keys
_PREFIX = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/@+=-]{0,127}")
DRIVER_ERRORS = (redis.exceptions.RedisError, redis.exceptions.RedisClusterException)
_BACKOFF = {"base": 0.05, "cap": 1.0}  # waits base * 2**failures: 0.1, 0.2, 0.4, 0.8, 1, 1 s...
_CERT_REQS = ("none", "optional", "required")
# the longest socket_timeout (about 31 years): a socket cannot wait much longer
_MAX_TIMEOUT = 10**9
# Connections an asyncio client opens at most (per Cluster node); more concurrent commands
# wait for a free one (see RedisTarget.async_client). A Cluster client may open a few more
# for its own use (refreshing the slot map), outside the requests counted.
ASYNC_CONNECTIONS = 64
_CLUSTER_SPARE = 8
ASYNC_IO = ("threads", "asyncio")  # RedisCheckpointerOptions.async_io

# -- options ---------------------------------------------------------------------------
# How the Redis components reach their server and name their keys, as small immutable
# records: the checkpointer and the memory store both take RedisOptions, so one object can
# configure both; RedisCheckpointerOptions adds the checkpointer's key lifetimes. Values
# are checked when a component is built from them (ConfigurationError then), not here.

CLAIM_TTL = 30.0  # seconds a claim outlives its holder's last renewal


@dataclass(frozen=True, slots=True)
class RedisOptions:
    """How a Redis component reaches its server and names its keys.

    Attributes:
        prefix: every key starts with ``<prefix>:``; components with different prefixes
            never see or touch each other's keys (a checkpointer and a store may share
            one). 1-128 letters, digits and ``_ . : / @ + = -``, starting with a letter
            or digit.
        retries: how often a command is retried, with exponential backoff (0.1 s up to
            1 s between attempts), after a dropped connection or a timeout.
        socket_timeout: seconds to wait for a connection or a reply.
        ssl_ca_certs, ssl_cert_reqs: TLS trust settings for ``rediss`` URLs (the CA
            bundle, default the system's; ``"none"``, ``"optional"`` or ``"required"``).
        mode: ``"rw"`` reads and writes; ``"ro"`` only reads: opening writes nothing,
            every write raises :class:`~statekeeper.errors.ReadOnlyError`, and a prefix
            holding no data at all raises
            :class:`~statekeeper.errors.StorageNotFoundError` when opened.
    """

    prefix: str = "statekeeper"
    retries: int = 5
    socket_timeout: float = 10.0
    ssl_ca_certs: str | None = None
    ssl_cert_reqs: str = "required"
    mode: str = "rw"

    @classmethod
    def split(cls, options: Mapping[str, Any]) -> tuple[Self, dict[str, Any]]:
        """``options`` (a component's merged URL and keyword options) as a record of this
        class, and the options left over: the component's own keywords."""
        names = {option.name for option in fields(cls)}
        mine = {name: value for name, value in options.items() if name in names}
        rest = {name: value for name, value in options.items() if name not in names}
        return cls(**mine), rest


@dataclass(frozen=True, slots=True)
class RedisCheckpointerOptions(RedisOptions):
    """:class:`RedisOptions` plus the lifetimes of a checkpointer's keys.

    Attributes:
        ttl: seconds until a thread's keys expire, all together; every write to the
            thread starts the count again. ``None``: never.
        refresh_on_read: ``get_tuple`` and ``list`` of a thread start the count again too
            (needs ``ttl``).
        claim_ttl: seconds a ``claim_thread`` claim outlives its holder (it is renewed
            every third of that while held, so only a dead or cut-off holder loses it).
        async_io: how the async API reaches the server: ``"threads"`` (default) runs
            the sync client in worker threads (``asyncio.to_thread``), ``"asyncio"``
            uses redis-py's asyncio client on the event loop. Same operations, same
            guarantees; threads leave the loop free while a reply is parsed, and carry
            an ``ainvoke`` fleet about 1.7x as fast (docs/benchmarks.md).
    """

    ttl: float | None = None
    refresh_on_read: bool = False
    claim_ttl: float = CLAIM_TTL
    async_io: str = "threads"

    @classmethod
    def extending(cls, options: RedisOptions | None = None, **lifetimes: Any) -> Self:
        """``options`` (default: all defaults) with the key ``lifetimes`` given
        (``ttl``, ``refresh_on_read``, ``claim_ttl``); a record of this class is returned
        with those replaced."""
        return cls(**{**(asdict(options) if options is not None else {}), **lifetimes})


# -- keys ------------------------------------------------------------------------------------


def tag(ident: str) -> str:
    """``ident`` percent-encoded (UTF-8; only ``A-Z a-z 0-9 _ . - ~`` kept), for use inside
    a key's ``{hash tag}``: never contains ``{ } : * ? [ ]``, spaces or control characters,
    and distinct ids always give distinct tags."""
    return quote(ident, safe="")


def untag(text: str | bytes) -> str:
    """Inverse of :func:`tag`."""
    if isinstance(text, bytes):
        text = text.decode("ascii")
    return unquote(text, errors="strict")


_END = b"\x00\x01"


def ordered(text: str) -> bytes:
    """``text`` as UTF-8 with NUL escaped (``00`` -> ``00 ff``) and ``00 01`` appended.

    Byte order of the result is the order of the text, and a concatenation of encoded
    parts sorts like the tuple of the parts, so tuples can be Redis sorted-set members
    (``ZRANGE ... BYLEX``) and hash fields, and be split again (:func:`split_ordered`)."""
    return text.encode("utf-8").replace(b"\x00", b"\x00\xff") + _END


def split_ordered(data: bytes) -> list[str]:
    """The parts of a concatenation of :func:`ordered` parts (plus any unencoded tail)."""
    return [part.replace(b"\x00\xff", b"\x00").decode("utf-8") for part in data.split(_END)]


def pack(*parts: bytes) -> bytes:
    """Length-prefixed parts (``b"3:abc0:"``): simple enough for Lua to read too."""
    return b"".join(b"%d:%s" % (len(part), part) for part in parts)


def unpack(data: bytes, count: int, start: int = 0) -> tuple[list[bytes], bytes]:
    """The first ``count`` parts of :func:`pack` output (read from ``start``), and the
    bytes after them.

    Raises:
        ValueError: ``data`` does not hold ``count`` parts (the message says why, in
            words: it ends up in what a damaged record is reported with).
    """
    parts: list[bytes] = []
    pos = start
    for _ in range(count):
        colon = data.find(b":", pos)
        size = data[pos:colon] if colon != -1 else b""
        if not size.isdigit():  # ASCII digits only (bytes), no sign
            raise ValueError("a part's length is missing or is not a number")
        end = colon + 1 + int(size)
        if end > len(data):
            raise ValueError("a length-prefixed part runs past the end of the data")
        parts.append(data[colon + 1 : end])
        pos = end
    return parts, data[pos:]


# -- one command on a bare connection -------------------------------------------------------


def packed(args: tuple[Any, ...]) -> bytes:
    """``args`` (bytes, text or integers) as one RESP command, built in one join."""
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        parts += (b"$%d\r\n" % len(data), data, b"\r\n")
    return b"".join(parts)


def send(conn: Any, command: bytes, instead: Callable[[], bytes]) -> Any:
    """The reply to a packed ``command`` (an ``EVALSHA``) on ``conn``, with the
    connection's retries; ``instead()`` (its ``EVAL``) is sent when the server does not
    have the script yet. This is what ``execute_command`` does for a command without a
    reply callback, minus its per-command pool checks and bookkeeping, which cost more
    CPU than the round trip on loopback: a script call is most of what a ``put`` costs."""

    def attempt(data: bytes) -> Any:
        conn.send_packed_command((data,), check_health=False)
        return conn.read_response()

    def once(data: bytes) -> Any:
        return conn.retry.call_with_retry(lambda: attempt(data), lambda _: conn.disconnect())

    try:
        return once(command)
    except redis.exceptions.NoScriptError:
        return once(instead())


async def asend(conn: Any, command: bytes, instead: Callable[[], bytes]) -> Any:
    """:func:`send` on an asyncio connection (on an event loop, the client's pool checks
    and bookkeeping cost about as much of the loop's time as the round trip)."""

    async def attempt(data: bytes) -> Any:
        await conn.send_packed_command(data, check_health=False)
        return await conn.read_response()

    async def once(data: bytes) -> Any:
        return await conn.retry.call_with_retry(lambda: attempt(data), lambda _: conn.disconnect())

    try:
        return await once(command)
    except redis.exceptions.NoScriptError:
        return await once(instead())


# -- targets ---------------------------------------------------------------------------------


def check_prefix(prefix: object) -> str:
    """``prefix`` when it is a valid key prefix.

    Raises:
        ConfigurationError: it is not 1-128 letters, digits and ``_ . : / @ + = -``
            starting with a letter or digit.
    """
    if not isinstance(prefix, str) or not _PREFIX.fullmatch(prefix):
        raise ConfigurationError(
            f"bad Redis key prefix {prefix!r}: use 1-128 letters, digits and _ . : / @ + = -"
            ", starting with a letter or digit"
        )
    return prefix


@dataclass(frozen=True)
class RedisTarget:
    """Where a Redis URL points and how to talk to it (no connection is made here)."""

    url: str  # redacted: safe for messages
    host: str
    port: int
    db: int
    cluster: bool
    tls: bool
    username: str | None = None
    password: str | None = field(default=None, repr=False)  # never shown
    socket_timeout: float = 10.0
    retries: int = 5
    ssl_ca_certs: str | None = None
    ssl_cert_reqs: str = "required"

    @classmethod
    def from_url(cls, url: StorageURL, **options: Any) -> RedisTarget:
        """Parse ``redis://[[user]:password@]host[:port][/db]`` (and the TLS and Cluster
        schemes). ``options`` are the connection options of this class.

        Raises:
            ConfigurationError: no host, a bad port or database number, a database other
                than 0 for a Cluster, a bad option value, or a scheme not for Redis.
        """
        shown = redact(url.raw)
        if url.scheme not in SCHEMES:
            raise ConfigurationError(f"{shown!r} is not a Redis URL")
        parts = urlsplit(url.raw)
        try:
            port = parts.port or 6379
        except ValueError:
            raise ConfigurationError(f"bad port in Redis URL {shown!r}") from None
        if not parts.hostname:
            raise ConfigurationError(
                f"Redis URL {shown!r} names no host; write {url.scheme}://host:6379"
                + ("" if "cluster" in url.scheme else "/0")
            )
        db_text = url.path.strip("/")
        if db_text and not (db_text.isascii() and db_text.isdigit()):
            raise ConfigurationError(
                f"bad database number {db_text!r} in Redis URL {shown!r}; write /0, /1, ..."
            )
        db = int(db_text or 0)
        cluster = url.scheme.endswith("+cluster")
        if cluster and db:
            raise ConfigurationError(
                f"Redis Cluster has only database 0, but {shown!r} names database {db}"
            )
        retries = options.get("retries", 5)
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ConfigurationError(f"option retries must be a whole number >= 0, got {retries!r}")
        timeout = options.get("socket_timeout", 10.0)
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not 0 < timeout <= _MAX_TIMEOUT
        ):
            raise ConfigurationError(
                f"option socket_timeout must be seconds > 0 (finite, at most {_MAX_TIMEOUT:,}),"
                f" got {timeout!r}"
            )
        reqs = options.get("ssl_cert_reqs", "required")
        if reqs not in _CERT_REQS:
            raise ConfigurationError(f"option ssl_cert_reqs must be one of {', '.join(_CERT_REQS)}")
        return cls(
            url=shown,
            host=parts.hostname,
            port=port,
            db=db,
            cluster=cluster,
            tls=url.scheme.startswith("rediss"),
            username=unquote(parts.username) if parts.username else None,
            password=unquote(parts.password) if parts.password is not None else None,
            **options,
        )

    @classmethod
    def for_component(cls, url: str, options: RedisOptions, opener: str) -> RedisTarget:
        """The target of a component built from ``url`` and ``options``, with its key
        prefix checked. Query options are refused: ``opener`` (e.g. ``"open_store()"``)
        is what reads them.

        Raises:
            ConfigurationError: as :meth:`from_url`, or the URL has query options, or
                :func:`check_prefix` refuses the prefix.
        """
        parsed = parse_url(url, list(SCHEMES))
        if parsed.options:
            raise ConfigurationError(f"pass options as keywords, or open the URL with {opener}")
        check_prefix(options.prefix)
        return cls.from_url(
            parsed,
            retries=options.retries,
            socket_timeout=options.socket_timeout,
            ssl_ca_certs=options.ssl_ca_certs,
            ssl_cert_reqs=options.ssl_cert_reqs,
        )

    def _common(self) -> dict[str, Any]:
        options: dict[str, Any] = {
            "host": self.host,
            "port": self.port,
            "username": self.username,
            "password": self.password,
            "socket_timeout": self.socket_timeout,
            "socket_connect_timeout": self.socket_timeout,
            "decode_responses": False,
        }
        if self.tls:
            options.update(
                ssl=True, ssl_ca_certs=self.ssl_ca_certs, ssl_cert_reqs=self.ssl_cert_reqs
            )
        return options

    def sync_client(self, *, single_connection: bool = False) -> Any:
        """A thread-safe synchronous client (standalone or Cluster). Connects lazily,
        except that a Cluster client reads the slot map now. ``single_connection``
        (standalone only): one connection, no pool, for one thread's use."""
        retry = Retry(ExponentialBackoff(**_BACKOFF), self.retries)
        if self.cluster:
            return redis.cluster.RedisCluster(retry=retry, **self._common())
        return redis.Redis(
            db=self.db,
            retry=retry,
            retry_on_error=[redis.exceptions.ConnectionError, redis.exceptions.TimeoutError],
            single_connection_client=single_connection,
            **self._common(),
        )

    def async_client(self) -> Any:
        """An asyncio client, to be used on the event loop that creates it only.

        Requests beyond what its connections can carry wait for one to come free, up to
        ``socket_timeout`` seconds (redis-py's own pool raises "Too many connections"
        instead, which a busy event loop — a hundred ``ainvoke`` at once — reaches):
        :class:`~statekeeper.backends.redis._io.Connection` lets at most
        :data:`ASYNC_CONNECTIONS` requests of a loop be under way at once, each holding
        at most one connection per node, and on a standalone server the client's pool
        (a ``BlockingConnectionPool`` of that size) waits as well. A Cluster client may
        open a few more connections per node (``_CLUSTER_SPARE``) to refresh its slot map."""
        retry = redis.asyncio.retry.Retry(ExponentialBackoff(**_BACKOFF), self.retries)
        errors: list[type[Exception]] = [
            redis.exceptions.ConnectionError,
            redis.exceptions.TimeoutError,
        ]
        common = self._common()
        if self.cluster:
            return redis.asyncio.cluster.RedisCluster(
                retry=retry,
                retry_on_error=errors,
                max_connections=ASYNC_CONNECTIONS + _CLUSTER_SPARE,
                **common,
            )
        tls = common.pop("ssl", False)
        pool = redis.asyncio.BlockingConnectionPool(
            max_connections=ASYNC_CONNECTIONS,
            timeout=self.socket_timeout,
            connection_class=redis.asyncio.SSLConnection if tls else redis.asyncio.Connection,
            db=self.db,
            retry=retry,
            retry_on_error=errors,
            **common,
        )
        return redis.asyncio.Redis.from_pool(pool)  # closing the client closes the pool

    def error(self, exc: BaseException) -> StorageError:
        """``exc`` (from the driver) as a StorageError that names this target: a
        :class:`~statekeeper.errors.ReadOnlyError` when the server refuses writes (a
        read-only replica)."""
        if isinstance(exc, redis.exceptions.ReadOnlyError):
            return ReadOnlyError(
                f"Redis at {self.url} refuses writes (it is a read-only replica: {exc}); "
                "write to the primary, or open the replica with mode=ro to read"
            )
        if isinstance(exc, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError):
            return StorageError(
                f"cannot reach Redis at {self.url} (after {self.retries} retries): {exc}"
            )
        text = str(exc)
        clustered = (
            redis.exceptions.MovedError,
            redis.exceptions.AskError,
            redis.exceptions.ClusterCrossSlotError,
        )
        if isinstance(exc, clustered) and not self.cluster:
            return StorageError(
                f"Redis at {self.url} is a Cluster node (it answered {type(exc).__name__}: "
                f"{text}); open it with redis+cluster://{self.host}:{self.port}"
            )
        return StorageError(f"Redis at {self.url} failed: {type(exc).__name__}: {text}")
