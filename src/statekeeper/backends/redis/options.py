"""The options of the Redis components, as small immutable records.

:class:`RedisOptions` says how a component reaches Redis and names its keys. The
checkpointer and the memory store both take it, so one object can configure both::

    from statekeeper.backends.redis.options import RedisCheckpointerOptions, RedisOptions
    from statekeeper.checkpointers import RedisCheckpointer
    from statekeeper.memory.store import RedisStore

    shared = RedisOptions(prefix="app", retries=3)
    store = RedisStore("redis://cache:6379/0", shared)
    saver = RedisCheckpointer("redis://cache:6379/0", shared)  # default key lifetimes
    saver = RedisCheckpointer(
        "redis://cache:6379/0", RedisCheckpointerOptions.extending(shared, ttl=3600)
    )

:class:`RedisCheckpointerOptions` adds the checkpointer's key lifetimes. Values are
checked when a component is built from them (:class:`ConfigurationError` then), not here.
``open_checkpointer(url, prefix=..., ttl=...)`` and ``open_store(url, prefix=...)`` build
these records from URL query options and keywords (:meth:`RedisOptions.split`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any, Self

from statekeeper.backends.redis._claims import CLAIM_TTL

__all__ = ["RedisCheckpointerOptions", "RedisOptions"]


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
    """

    prefix: str = "statekeeper"
    retries: int = 5
    socket_timeout: float = 10.0
    ssl_ca_certs: str | None = None
    ssl_cert_reqs: str = "required"

    @classmethod
    def split(cls, options: Mapping[str, Any]) -> tuple[Self, dict[str, Any]]:
        """``options`` (a component's merged URL and keyword options) as a record of this
        class, and the options left over: the component's own keywords."""
        names = {field.name for field in fields(cls)}
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
    """

    ttl: float | None = None
    refresh_on_read: bool = False
    claim_ttl: float = CLAIM_TTL

    @classmethod
    def extending(cls, options: RedisOptions | None = None, **lifetimes: Any) -> Self:
        """``options`` (default: all defaults) with the key ``lifetimes`` given
        (``ttl``, ``refresh_on_read``, ``claim_ttl``); a record of this class is returned
        with those replaced."""
        return cls(**{**(asdict(options) if options is not None else {}), **lifetimes})
