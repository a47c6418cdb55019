"""Thread claims in Redis (``claim_thread``), shared by every process and host that uses
the server.

A claim is one string key per thread, ``<prefix>:{<tag>}:claim`` (in the thread's slot),
holding JSON that describes the holder (``pid``, ``host``, ``since``, ``thread_id``) and a
random ``token`` that makes the value unique to one claim. It is taken with ``SET ... NX
PX <ttl>``, so it expires ``claim_ttl`` after it was last renewed: a holder that dies,
however it dies, frees the thread within that time. While the claim is held a daemon
thread renews it every third of the TTL, only if the key still holds this claim's value
(compare and ``PEXPIRE``), and the release deletes it only on the same condition, so a
holder never extends or deletes another run's claim.

:meth:`Claims.holder` reads the key (a ``GET``) without taking the claim.

A renewal that finds the claim gone (it expired, for instance because this process could
not reach Redis for longer than the TTL, and possibly another run took it) cannot stop the
run that holds it; it logs a warning on the ``statekeeper.backends.redis.checkpointer`` logger and
stops renewing. A renewal or a release that cannot reach Redis logs a warning too: the
claim then expires on its own.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import uuid
from collections.abc import Iterator
from typing import Any

from statekeeper._storage.claims import busy_error, holder_info
from statekeeper._storage.payload import check_id
from statekeeper.backends.redis._io import Cmd, Connection, Eval, Op, Script
from statekeeper.backends.redis._layout import Layout
from statekeeper.errors import StorageError

__all__ = ["Claims"]

log = logging.getLogger("statekeeper.backends.redis.checkpointer")

# KEYS: the claim key. ARGV: the holder's value, ttl (ms). Takes the claim if it is free;
# the reply is the value the key holds now (the caller's own if it got the claim, also
# when this call is a retry of one that took it).
_TAKE = Script(
    r"""
redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
return redis.call('GET', KEYS[1])
"""
)

# KEYS: the claim key. ARGV: the holder's value, ttl (ms). Restarts the ttl if the key
# still holds that value (reply 1); else the reply is the value it holds (nil if none).
_RENEW = Script(
    r"""
local held = redis.call('GET', KEYS[1])
if held == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return held
"""
)

# KEYS: the claim key. ARGV: the holder's value. Deletes the key if it holds that value.
_RELEASE = Script(
    r"""
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
)


def _call(script: Script, key: bytes, *args: Any) -> Op[Any]:
    return (yield Eval(script, (key,), args))


def _get(key: bytes) -> Op[Any]:
    return (yield Cmd(("GET", key)))


class Claims:
    """The claims of one checkpointer's threads (see the module docstring)."""

    def __init__(self, conn: Connection, layout: Layout, ttl: float) -> None:
        self._conn = conn
        self._layout = layout
        self.ttl = ttl

    @contextlib.contextmanager
    def claim(self, thread_id: str) -> Iterator[None]:
        """Hold the claim on ``thread_id`` for the ``with`` block (see the module docstring).

        Raises:
            ThreadBusyError: another claim holds the key; the error names its holder.
            InvalidIdError: ``thread_id`` cannot be stored.
            StorageError: the server cannot be reached.
        """
        thread_id = check_id(thread_id, "thread_id")
        key = self._layout.claim_key(thread_id)
        holder = dict(holder_info(), thread_id=thread_id, token=uuid.uuid4().hex)
        value = json.dumps(holder).encode()
        ttl_ms = max(1, round(self.ttl * 1000))
        held = self._conn.run(_call(_TAKE, key, value, ttl_ms))
        if held != value:
            raise busy_error(thread_id, _holder(held))
        stop = threading.Event()
        renewer = threading.Thread(
            target=self._renew,
            args=(thread_id, key, value, ttl_ms, stop),
            name=f"statekeeper-claim-{thread_id[:40]}",
            daemon=True,
        )
        renewer.start()
        try:
            yield
        finally:
            stop.set()
            try:
                self._conn.run(_call(_RELEASE, key, value))
            except StorageError as exc:
                log.warning(
                    "could not release the claim on thread %r (it expires within %g s): %s",
                    thread_id,
                    self.ttl,
                    exc,
                )

    def holder(self, thread_id: str) -> dict[str, Any] | None:
        """Who holds the claim on ``thread_id`` (``None``: nobody), read without taking
        it; an expired claim is nobody's.

        Raises:
            InvalidIdError: ``thread_id`` cannot be stored.
            StorageError: the server cannot be reached.
        """
        thread_id = check_id(thread_id, "thread_id")
        held = self._conn.run(_get(self._layout.claim_key(thread_id)))
        return None if held is None else dict(_holder(held), thread_id=thread_id)

    def _renew(
        self, thread_id: str, key: bytes, value: bytes, ttl_ms: int, stop: threading.Event
    ) -> None:
        while not stop.wait(self.ttl / 3):
            try:
                reply = self._conn.run(_call(_RENEW, key, value, ttl_ms))
            except StorageError as exc:
                if self._conn.closed:
                    return  # the saver was closed: the claim expires on its own
                log.warning(
                    "could not renew the claim on thread %r; it expires %g s after its last "
                    "renewal: %s",
                    thread_id,
                    self.ttl,
                    exc,
                )
                continue
            if reply != 1:
                if not stop.is_set():  # not a renewal racing the release
                    holder = _holder(reply)
                    log.warning(
                        "lost the claim on thread %r: it expired%s; the run goes on unclaimed",
                        thread_id,
                        f" and is now held by {holder}" if holder else "",
                    )
                return


def _holder(value: bytes | None) -> dict[str, Any]:
    """Who holds a claim, from its stored value (without its token)."""
    try:
        holder = json.loads(value or b"{}")
    except ValueError:
        return {}
    if not isinstance(holder, dict):
        return {}
    holder.pop("token", None)
    return holder
