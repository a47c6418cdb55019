"""Redis and Valkey 6.2+ with no modules: ``redis://``, ``rediss://`` (TLS),
``redis+cluster://`` and ``rediss+cluster://``. Needs ``pip install 'statekeeper[redis]'``.

Every key of a thread (or a memory namespace) shares one hash tag, writes are Lua scripts,
and each operation is written once as a sans-IO generator run by the sync or the asyncio
client (:mod:`statekeeper.backends.redis._io`). The key layout is in ``docs/redis.md``.
"""

from statekeeper.errors import ConfigurationError

try:  # every module of this package needs the driver: say what to install, once, here
    import redis  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised in a subprocess
    raise ConfigurationError(
        "Redis URLs need the redis package: pip install 'statekeeper[redis]'"
    ) from exc
