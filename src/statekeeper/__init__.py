"""statekeeper: durable state for LangGraph agent workflows.

Checkpointers chosen by URL (:func:`open_checkpointer`), resumable by thread id, with one
exception tree rooted at :class:`StatekeeperError`. Importing this package imports no
optional dependency.
"""

from __future__ import annotations

from statekeeper.checkpointers import open_checkpointer
from statekeeper.errors import (
    ConfigurationError,
    CorruptCheckpointError,
    InvalidIdError,
    SchemaVersionError,
    SerializationError,
    StatekeeperError,
    StorageError,
    ThreadExistsError,
)

__all__ = [
    "ConfigurationError",
    "CorruptCheckpointError",
    "InvalidIdError",
    "SchemaVersionError",
    "SerializationError",
    "StatekeeperError",
    "StorageError",
    "ThreadExistsError",
    "open_checkpointer",
]

__version__ = "0.1.0.dev0"
