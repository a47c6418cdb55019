"""One exception tree for everything statekeeper raises.

Every error derives from :class:`StatekeeperError`, so ``except StatekeeperError`` catches
anything this library raises on purpose. Errors caused by a driver (``sqlite3``, ``redis``,
the file system) are wrapped with ``raise ... from exc``: the original is kept as
``__cause__`` for debugging, while the message says what went wrong and what to do.
"""

from __future__ import annotations

__all__ = [
    "ConfigurationError",
    "InvalidIdError",
    "SchemaVersionError",
    "SerializationError",
    "StatekeeperError",
    "StorageError",
    "ThreadExistsError",
]


class StatekeeperError(Exception):
    """Base class of every error raised by statekeeper."""


class ConfigurationError(StatekeeperError, ValueError):
    """A URL or option is malformed or names something that does not exist."""


class InvalidIdError(StatekeeperError, ValueError):
    """A thread id, namespace, checkpoint id or task id cannot be stored as given."""


class SerializationError(StatekeeperError, ValueError):
    """A value cannot be stored without being altered, or stored bytes cannot be decoded."""


class StorageError(StatekeeperError):
    """The storage backend failed (I/O error, lost connection, locked database...)."""


class SchemaVersionError(StorageError):
    """The stored data was written by a newer statekeeper than the one reading it."""


class ThreadExistsError(StatekeeperError):
    """A copy or import would write into a thread that already has checkpoints."""
