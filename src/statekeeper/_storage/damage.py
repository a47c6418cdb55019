"""Damage found while reading a row-based store (SQLite, PostgreSQL): where it was found,
the one-line message, and the :class:`~statekeeper.errors.CorruptCheckpointError` that
carries it. Each backend names itself and its storage; the wording is shared."""

from __future__ import annotations

from dataclasses import dataclass, replace

from statekeeper.errors import CorruptCheckpointError, Damage

__all__ = ["Where", "corrupt_error", "damage_message", "with_location"]


@dataclass(frozen=True, slots=True)
class Where:
    """What a read was reading when it found damage: the database and, as far as known,
    the thread, namespace and checkpoint."""

    database: str
    thread_id: str | None = None
    checkpoint_ns: str | None = None
    checkpoint_id: str | None = None


def damage_message(place: str, damage: Damage) -> str:
    """One line: what is damaged, where (``place``: the storage, e.g. "the SQLite
    database 'x.db'"), and what to do."""
    subject = "a stored record"
    if damage.checkpoint_id is not None:
        subject = f"checkpoint {damage.checkpoint_id!r}"
    if damage.thread_id is not None:
        subject += f" of thread {damage.thread_id!r}"
        if damage.checkpoint_ns:
            subject += f" (namespace {damage.checkpoint_ns!r})"
    at = f" [{damage.path}]" if damage.path else ""
    return (
        f"{subject} in {place} is damaged: {damage.reason}{at}; run verify() to list the "
        "damage, read with on_corrupt='fallback' to skip it, or restore a backup"
    )


def corrupt_error(
    backend: str, place: str, where: Where, record: str, path: str, reason: str
) -> CorruptCheckpointError:
    """The error for damage found at ``path`` while reading ``where``."""
    damage = Damage(
        reason,
        backend=backend,
        thread_id=where.thread_id,
        checkpoint_ns=where.checkpoint_ns,
        checkpoint_id=where.checkpoint_id,
        record=record,
        path=path,
    )
    return CorruptCheckpointError(damage_message(place, damage), damage)


def with_location(
    error: CorruptCheckpointError, where: Where, place: str
) -> CorruptCheckpointError:
    """``error`` with the thread, namespace and checkpoint of ``where`` filled in where
    it names none (a driver error names only the database)."""
    damage = error.damage
    if damage.thread_id is not None or where.thread_id is None:
        return error
    located = replace(
        damage,
        thread_id=where.thread_id,
        checkpoint_ns=where.checkpoint_ns,
        checkpoint_id=where.checkpoint_id,
    )
    return CorruptCheckpointError(damage_message(place, located), located)
