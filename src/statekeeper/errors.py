"""One exception tree for everything statekeeper raises.

Every error derives from :class:`StatekeeperError`, so ``except StatekeeperError`` catches
anything this library raises on purpose. Errors caused by a driver (``sqlite3``, ``redis``,
the file system) are wrapped with ``raise ... from exc``: the original is kept as
``__cause__`` for debugging, while the message says what went wrong and what to do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "AmbiguousReferenceError",
    "AnswerRequiredError",
    "ConfigurationError",
    "CorruptCheckpointError",
    "Damage",
    "GraphLoadError",
    "InvalidIdError",
    "InvalidInputError",
    "NoPendingInterruptError",
    "NothingToResumeError",
    "ReadOnlyError",
    "Refusal",
    "RefusedValuesError",
    "SchemaVersionError",
    "SerializationError",
    "StateValidationError",
    "StatekeeperError",
    "StorageError",
    "StorageNotFoundError",
    "SummarizerOutputError",
    "ThreadBusyError",
    "ThreadExistsError",
    "ThreadNotFoundError",
]


class StatekeeperError(Exception):
    """Base class of every error raised by statekeeper."""


class ConfigurationError(StatekeeperError, ValueError):
    """A URL or option is malformed or names something that does not exist."""


class InvalidIdError(StatekeeperError, ValueError):
    """A thread id, namespace, checkpoint id or task id cannot be stored as given."""


class AmbiguousReferenceError(InvalidIdError):
    """A checkpoint reference (an id prefix, ``@STEP``) names several checkpoints.
    ``reference`` is the reference as given; ``candidates`` the ids it matches, newest
    first."""

    def __init__(
        self, message: str, *, reference: str = "", candidates: tuple[str, ...] = ()
    ) -> None:
        super().__init__(message)
        self.reference = reference
        self.candidates = candidates

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (str(self),), self.__dict__)


class SerializationError(StatekeeperError, ValueError):
    """A value cannot be stored without being altered, or stored bytes cannot be decoded."""


@dataclass(frozen=True)
class Refusal:
    """A stored value a transfer refused to read, and where it is: what
    :class:`RefusedValuesError` and ``TransferStats.refusals`` list. ``channel`` names the
    channel (``"write to CHANNEL by task ID"`` for a pending write), or is ``None`` when
    the whole checkpoint was refused."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    channel: str | None
    reason: str

    def __str__(self) -> str:
        where = f"thread {self.thread_id!r}, checkpoint {self.checkpoint_id!r}"
        if self.checkpoint_ns:
            where += f" (namespace {self.checkpoint_ns!r})"
        what = "the checkpoint" if self.channel is None else self.channel
        return f"{where}, {what}: {self.reason}"


class RefusedValuesError(SerializationError):
    """A transfer met stored values it will not read (a pickle payload, an object of a
    type not allowed to be rebuilt...): nothing was written. ``refusals`` lists every one
    met, each with its thread, checkpoint and channel (:class:`Refusal`)."""

    def __init__(self, message: str, refusals: tuple[Refusal, ...]) -> None:
        super().__init__(message)
        self.refusals = refusals

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (str(self), self.refusals))


class StorageError(StatekeeperError):
    """The storage backend failed (I/O error, lost connection, locked database...)."""


class ReadOnlyError(StorageError):
    """A write was asked of storage opened read-only (``?mode=ro``, or storage that is not
    writable, such as a read-only mount). Nothing was written."""


class StorageNotFoundError(StorageError, LookupError):
    """Storage opened read-only does not exist (no database file, no directory): nothing
    was created in its place."""


class SchemaVersionError(StorageError):
    """The stored data was written by a newer statekeeper than the one reading it."""


@dataclass(frozen=True)
class Damage:
    """What is damaged, and where: what ``verify()`` reports and what
    :class:`CorruptCheckpointError` carries. Fields are ``None`` when not known.

    ``record`` is the kind of stored record at fault: ``"checkpoint"``, ``"metadata"``,
    ``"writes"``, ``"value"``, ``"delta"``, ``"index"`` or ``"head"``; ``path`` names it
    in the backend's terms (a file, a row, a key).
    """

    reason: str
    backend: str | None = None
    thread_id: str | None = None
    checkpoint_ns: str | None = None
    checkpoint_id: str | None = None
    record: str | None = None
    path: str | None = None


class CorruptCheckpointError(StorageError):
    """A stored checkpoint failed its integrity check: a record it needs is truncated,
    altered (checksum mismatch) or missing. Nothing is returned in its place unless the
    backend was asked to fall back to an older checkpoint.

    ``damage`` says what is damaged and where (:class:`Damage`); its fields are also
    attributes of the error (``thread_id``, ``checkpoint_id``, ``path``, ``reason``...).
    """

    def __init__(self, message: str, damage: Damage) -> None:
        super().__init__(message)
        self.damage = damage

    def __getattr__(self, name: str) -> Any:
        # the damage's fields read as the error's own (error.thread_id, error.path...)
        if name != "damage" and name in Damage.__dataclass_fields__:
            return getattr(self.damage, name)
        raise AttributeError(name)

    def __reduce__(self) -> tuple[object, ...]:
        # the damage survives pickling (multiprocessing, logging handlers)
        return (type(self), (str(self), self.damage))


class ThreadExistsError(StatekeeperError):
    """A copy or import would write into a thread that already has checkpoints."""


class ThreadNotFoundError(StatekeeperError, LookupError):
    """The thread (or the checkpoint named in it) has no checkpoints in this storage.

    ``thread_id`` and ``checkpoint_id`` name what is missing, when the raiser knows
    (``checkpoint_id`` is ``None`` when the thread itself is missing); ``reason`` says
    why a checkpoint reference named nothing (``"no checkpoint at step 9"``), if known."""

    def __init__(
        self,
        message: str,
        *,
        thread_id: str | None = None,
        checkpoint_id: str | None = None,
        reason: str | None = None,
    ) -> None:
        super().__init__(message)
        self.thread_id = thread_id
        self.checkpoint_id = checkpoint_id
        self.reason = reason

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (str(self),), self.__dict__)


class ThreadBusyError(StatekeeperError):
    """Another run holds the thread's claim (see ``Checkpointer.claim_thread``).

    ``thread_id`` names the thread; ``holder`` describes the run holding it (``pid``,
    ``host``, ``since``, as far as the backend knows; may be empty).
    """

    def __init__(self, message: str, *, thread_id: str, holder: dict[str, object]) -> None:
        super().__init__(message)
        self.thread_id = thread_id
        self.holder = holder

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (str(self),), self.__dict__)


class NothingToResumeError(StatekeeperError):
    """A resume was asked for a thread whose run has finished (no task left to run)."""


class StateValidationError(StatekeeperError, ValueError):
    """Stored graph state does not validate against the graph's state schema, or cannot
    be migrated to its version. Nothing was written.

    Attributes: ``thread_id``, ``checkpoint_id`` and ``field`` (the dotted path of the
    first invalid field, ``None`` when the whole state is at fault).
    """

    def __init__(
        self,
        message: str,
        *,
        thread_id: str | None = None,
        checkpoint_id: str | None = None,
        field: str | None = None,
    ) -> None:
        super().__init__(message)
        self.thread_id = thread_id
        self.checkpoint_id = checkpoint_id
        self.field = field

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (str(self),), self.__dict__)


class InvalidInputError(StateValidationError):
    """The input given to a new run does not fit the graph's input schema: it is not an
    object, names a key that is not one of the schema's fields, or a value does not
    validate. Raised before anything is claimed or written. ``field`` is the dotted path
    of the first invalid field (``None`` when the whole input is at fault); ``errors``
    lists every problem as ``(path, message)``."""

    def __init__(
        self,
        message: str,
        *,
        thread_id: str | None = None,
        field: str | None = None,
        errors: tuple[tuple[str | None, str], ...] = (),
    ) -> None:
        super().__init__(message, thread_id=thread_id, field=field)
        self.errors = errors


class GraphLoadError(ConfigurationError):
    """A graph reference cannot be loaded. ``ref`` is the reference as given; ``reason``
    says which step failed: ``"ref"`` (malformed), ``"module"`` (no such module),
    ``"import"`` (importing the module raised: the error is ``__cause__``),
    ``"attribute"`` (no such attribute), ``"type"`` (not a graph) or ``"compile"``
    (compiling the builder raised)."""

    def __init__(self, message: str, *, ref: str, reason: str) -> None:
        super().__init__(message)
        self.ref = ref
        self.reason = reason

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (str(self),), self.__dict__)


class AnswerRequiredError(StatekeeperError, ValueError):
    """A resume without an answer was asked of a thread waiting at an ``interrupt()``.
    ``thread_id`` names it; ``interrupts`` are the questions waiting for an answer."""

    def __init__(self, message: str, *, thread_id: str, interrupts: tuple[Any, ...]):
        super().__init__(message)
        self.thread_id = thread_id
        self.interrupts = interrupts

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (str(self),), self.__dict__)


class NoPendingInterruptError(StatekeeperError, ValueError):
    """An answer was given to a thread with no ``interrupt()`` waiting for one."""

    def __init__(self, message: str, *, thread_id: str) -> None:
        super().__init__(message)
        self.thread_id = thread_id

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (str(self),), self.__dict__)


class SummarizerOutputError(StatekeeperError, ValueError):
    """A chat model's answer is not the JSON a :class:`ChatModelSummarizer` asked for, and
    no fallback summarizer was given."""
