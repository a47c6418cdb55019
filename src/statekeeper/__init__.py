"""statekeeper: durable state for LangGraph agent workflows.

Checkpointers chosen by URL (:func:`open_checkpointer`), resumable by thread id, with one
exception tree rooted at :class:`StatekeeperError`. Importing this package imports no
optional dependency.
"""

from __future__ import annotations

from statekeeper.checkpointers import open_checkpointer
from statekeeper.errors import (
    AnswerRequiredError,
    ConfigurationError,
    CorruptCheckpointError,
    GraphLoadError,
    InvalidIdError,
    NoPendingInterruptError,
    NothingToResumeError,
    SchemaVersionError,
    SerializationError,
    StatekeeperError,
    StateValidationError,
    StorageError,
    SummarizerOutputError,
    ThreadBusyError,
    ThreadExistsError,
    ThreadNotFoundError,
)

__all__ = [
    "AnswerRequiredError",
    "ConfigurationError",
    "CorruptCheckpointError",
    "GraphLoadError",
    "InvalidIdError",
    "NoPendingInterruptError",
    "NothingToResumeError",
    "SchemaVersionError",
    "SerializationError",
    "StateValidationError",
    "StatekeeperError",
    "StorageError",
    "SummarizerOutputError",
    "ThreadBusyError",
    "ThreadExistsError",
    "ThreadNotFoundError",
    "open_checkpointer",
]

__version__ = "0.1.0.dev0"
