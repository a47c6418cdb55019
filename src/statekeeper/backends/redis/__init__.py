"""Redis and Valkey 6.2+ with no modules: ``redis://``, ``rediss://`` (TLS),
``redis+cluster://`` and ``rediss+cluster://``. Needs ``pip install 'statekeeper[redis]'``.

Every key of a thread (or a memory namespace) shares one hash tag, writes are Lua scripts,
and each operation is written once as a sans-IO generator run by the sync or the asyncio
client (:mod:`statekeeper.backends.redis._io`). The key layout is in ``docs/redis.md``.

Connection options are small records, shared by the checkpointer and the store::

    from statekeeper.backends.redis import RedisCheckpointerOptions, RedisOptions
    from statekeeper.checkpointers import RedisCheckpointer
    from statekeeper.memory.store import RedisStore

    shared = RedisOptions(prefix="app", retries=3)
    store = RedisStore("redis://cache:6379/0", shared)
    saver = RedisCheckpointer("redis://cache:6379/0", shared)  # default key lifetimes
    saver = RedisCheckpointer(
        "redis://cache:6379/0", RedisCheckpointerOptions.extending(shared, ttl=3600)
    )

``open_checkpointer(url, prefix=..., ttl=...)`` and ``open_store(url, prefix=...)`` build
these records from URL query options and keywords (:meth:`RedisOptions.split`).
"""

from statekeeper.backends.redis._client import RedisCheckpointerOptions, RedisOptions

__all__ = ["RedisCheckpointerOptions", "RedisOptions"]
