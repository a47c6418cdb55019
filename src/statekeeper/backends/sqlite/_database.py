"""SQLite plumbing shared by every statekeeper component that stores data in SQLite.

One :class:`Database` owns one ``sqlite3`` connection per process, serialises its use with
a lock (so it is safe to call from LangGraph's background threads), and owns the only
transaction helper: :meth:`Database.transaction` begins, commits and rolls back. Schema
changes are applied by :func:`migrate` from an ordered list of migrations, recorded in the
``statekeeper_migrations`` table per component, so several components can share one file.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from statekeeper.errors import ConfigurationError, SchemaVersionError, StorageError

__all__ = ["MEMORY", "Database", "Migration"]

MEMORY = ":memory:"


@dataclass(frozen=True)
class Migration:
    """One schema step: ``version`` is applied by running ``statements`` in order."""

    version: int
    description: str
    statements: tuple[str, ...]


class Database:
    """A SQLite database file opened for one component (``"checkpoints"``, ``"memory"``...).

    Guarantees:

    * WAL journal, ``synchronous=NORMAL`` and an explicit busy timeout, so several
      processes can share one file; write transactions start with ``BEGIN IMMEDIATE`` so
      they wait for the write lock instead of failing halfway with "database is locked".
    * Opening migrates the schema to the newest version idempotently (concurrent openers
      serialise on the write lock); a file written by a newer version is refused with
      :class:`~statekeeper.errors.SchemaVersionError` and left untouched.
    * Every ``sqlite3`` error leaving :meth:`transaction` is wrapped in
      :class:`~statekeeper.errors.StorageError` naming the file.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        component: str,
        migrations: Sequence[Migration],
        busy_timeout: float = 30.0,
    ) -> None:
        if busy_timeout < 0:
            raise ConfigurationError(f"busy_timeout must be >= 0 seconds, got {busy_timeout!r}")
        self.path = MEMORY if str(path) == MEMORY else str(Path(path).expanduser())
        self.component = component
        self.busy_timeout = busy_timeout
        self._migrations = tuple(sorted(migrations, key=lambda m: m.version))
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._pid = os.getpid()
        self._closed = False
        self._connect()

    # -- connection --------------------------------------------------------------------

    def _connect(self) -> None:
        if self.path != MEMORY:
            parent = Path(self.path).parent
            try:
                parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StorageError(
                    f"cannot create the directory {str(parent)!r} for the SQLite database: "
                    f"{exc.strerror or exc}; check the path and its permissions"
                ) from exc
        try:
            conn = sqlite3.connect(
                self.path,
                timeout=self.busy_timeout,
                isolation_level=None,  # autocommit: transaction() owns BEGIN/COMMIT
                check_same_thread=False,  # use is serialised by self._lock
            )
        except sqlite3.Error as exc:
            raise StorageError(f"cannot open SQLite database {self.path!r}: {exc}") from exc
        self._conn = conn
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
            if self.path != MEMORY:
                conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            migrate(self, self._migrations)
        except sqlite3.Error as exc:
            conn.close()
            self._conn = None
            raise _wrap(exc, self.path) from exc
        except BaseException:
            conn.close()
            self._conn = None
            raise

    def _connection(self) -> sqlite3.Connection:
        if self._closed:
            raise StorageError(
                f"the SQLite database {self.path!r} is closed; open a new checkpointer or store"
            )
        if self._pid != os.getpid():
            # A forked child must never share the parent's connection (SQLite forbids it).
            self._pid = os.getpid()
            if self.path == MEMORY:
                raise StorageError("an in-memory SQLite database cannot be used after fork()")
            self._connect()
        assert self._conn is not None
        return self._conn

    @contextmanager
    def transaction(self, *, write: bool) -> Iterator[sqlite3.Connection]:
        """Run the block in one transaction: committed if it returns, rolled back if it raises.

        ``write=True`` takes the write lock up front (``BEGIN IMMEDIATE``), waiting up to
        ``busy_timeout`` seconds for other writers; ``write=False`` reads one consistent
        snapshot. Transactions do not nest.
        """
        with self._lock:
            conn = self._connection()
            try:
                conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            except sqlite3.Error as exc:
                raise _wrap(exc, self.path) from exc
            try:
                yield conn
            except sqlite3.Error as exc:
                conn.rollback()
                raise _wrap(exc, self.path) from exc
            except BaseException:
                conn.rollback()
                raise
            try:
                conn.commit()
            except sqlite3.Error as exc:
                conn.rollback()
                raise _wrap(exc, self.path) from exc

    def close(self) -> None:
        """Close the connection. Idempotent; later use raises StorageError."""
        with self._lock:
            self._closed = True
            if self._conn is not None:
                self._conn.close()
                self._conn = None


def migrate(db: Database, migrations: Sequence[Migration]) -> int:
    """Bring ``db``'s component schema to the newest of ``migrations``; return that version.

    Each migration runs in the same write transaction that records it, so a crash leaves
    the schema at a recorded version. Safe to run concurrently from several processes.
    """
    latest = migrations[-1].version if migrations else 0
    assert db._conn is not None
    conn = db._conn
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS statekeeper_migrations ("
            " component TEXT NOT NULL, version INTEGER NOT NULL, description TEXT NOT NULL,"
            " applied_at TEXT NOT NULL, PRIMARY KEY (component, version))"
        )
        row = conn.execute(
            "SELECT MAX(version) FROM statekeeper_migrations WHERE component = ?",
            (db.component,),
        ).fetchone()
        current = row[0] or 0
        if current > latest:
            raise SchemaVersionError(
                f"the {db.component} schema in {db.path!r} is version {current}, written by a "
                f"newer statekeeper (this one understands up to version {latest}); "
                "upgrade statekeeper to open it"
            )
        for migration in migrations:
            if migration.version <= current:
                continue
            for statement in migration.statements:
                conn.execute(statement)
            conn.execute(
                "INSERT INTO statekeeper_migrations VALUES (?, ?, ?, ?)",
                (
                    db.component,
                    migration.version,
                    migration.description,
                    datetime.now(UTC).isoformat(),
                ),
            )
    except BaseException:
        conn.rollback()
        raise
    conn.commit()
    return latest


def _wrap(exc: sqlite3.Error, path: str) -> StorageError:
    message = str(exc)
    if "locked" in message or "busy" in message:
        hint = "another process held the write lock too long; raise busy_timeout or retry"
    elif isinstance(exc, sqlite3.DatabaseError) and "not a database" in message:
        hint = "the file is not a SQLite database or is corrupt; check the path"
    elif "readonly" in message or "read-only" in message:
        hint = "the file or its directory is not writable"
    else:
        hint = "see the cause above"
    return StorageError(f"SQLite error on {path!r}: {message} ({hint})")
