"""Redis and Valkey 6.2+ with no modules: ``redis://``, ``rediss://`` (TLS),
``redis+cluster://`` and ``rediss+cluster://``. Needs ``pip install 'statekeeper[redis]'``.

Every key of a thread (or a memory namespace) shares one hash tag, writes are Lua scripts,
and each operation is written once as a sans-IO generator run by the sync or the asyncio
client (:mod:`statekeeper.backends.redis._io`). The key layout is in ``docs/redis.md``.
"""
