"""SQLite plumbing shared by every statekeeper component that stores data in SQLite.

One :class:`Database` owns one ``sqlite3`` connection per process, serialises its use with
a lock (so it is safe to call from LangGraph's background threads), and owns the only
transaction helper: :meth:`Database.transaction` begins, commits and rolls back. Schema
changes are applied by :func:`migrate` from an ordered list of migrations, recorded in the
``statekeeper_migrations`` table per component, so several components can share one file.

Read-only (``mode="ro"``, or a database file or directory that is not writable): the file
is opened through a ``mode=ro`` URI and nothing is created (no file, directory or
migration). A schema older than this statekeeper's cannot be migrated then; instead each
table of the newest schema is shadowed in SQLite's ``temp`` schema, which unqualified
names resolve to first: a table that lacks newer columns by a view reading them as
``NULL`` (what rows written before those columns existed hold after a migration too), a
table that does not exist yet by an empty one. The shadows live in the connection's
memory; the file is never touched.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

from statekeeper.checkpointers.semantics import MODES, check_choice
from statekeeper.errors import (
    ConfigurationError,
    CorruptCheckpointError,
    Damage,
    ReadOnlyError,
    SchemaVersionError,
    StorageError,
    StorageNotFoundError,
)

__all__ = ["DRIVER_ERRORS", "MEMORY", "Database", "Migration", "wrap"]

MEMORY = ":memory:"
# SQLite waits at most 2**31 - 1 ms; a longer busy_timeout would wrap to no wait at all
MAX_BUSY_TIMEOUT = (2**31 - 1) // 1000
logger = logging.getLogger(__name__)

# SQLite's result codes for damage it found itself: SQLITE_CORRUPT (any extended code)
# and SQLITE_IOERR_SHORT_READ (a file shorter than its pages say: truncated).
_CORRUPT = 11
_SHORT_READ = 522
_NOT_A_DATABASE = 26
# What the sqlite3 module raises for SQLite's errors; a UnicodeDecodeError when SQLite's
# message is not UTF-8 (it quotes a damaged name from the schema).
DRIVER_ERRORS = (sqlite3.Error, UnicodeDecodeError)


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
    * ``mode="ro"``, or a file (or its directory) that is not writable: opened read-only
      (``read_only`` is true); a missing file raises
      :class:`~statekeeper.errors.StorageNotFoundError` and nothing is created; a write
      transaction raises :class:`~statekeeper.errors.ReadOnlyError`. A path that is a
      directory raises :class:`~statekeeper.errors.ConfigurationError`.
    * Every ``sqlite3`` error leaving :meth:`transaction` is wrapped in
      :class:`~statekeeper.errors.StorageError` naming the file; damage SQLite finds
      itself ("database disk image is malformed", a short read of a truncated file) is a
      :class:`~statekeeper.errors.CorruptCheckpointError`.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        component: str,
        migrations: Sequence[Migration],
        busy_timeout: float = 30.0,
        mode: str = "rw",
        lenient_text: bool = False,
    ) -> None:
        if (
            isinstance(busy_timeout, bool)
            or not isinstance(busy_timeout, int | float)
            or not 0 <= busy_timeout <= MAX_BUSY_TIMEOUT
        ):
            raise ConfigurationError(
                "busy_timeout must be a finite number of seconds >= 0 (at most "
                f"{MAX_BUSY_TIMEOUT:,}), got {busy_timeout!r}"
            )
        self.mode = check_choice("mode", mode, MODES)
        self.path = MEMORY if str(path) == MEMORY else str(Path(path).expanduser())
        self.component = component
        self.busy_timeout = busy_timeout
        self.read_only = mode == "ro"
        # The schema version the rows are in: the newest after a migration; older when a
        # read-only database could not be migrated (its missing columns read as NULL).
        self.schema_version = 0
        self._migrations = tuple(sorted(migrations, key=lambda m: m.version))
        self._lenient_text = lenient_text
        self._immutable = False
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._pid = os.getpid()
        self._closed = False
        self._connect()

    # -- connection --------------------------------------------------------------------

    def _connect(self) -> None:
        conn = self._open()
        self._conn = conn
        try:
            if self._lenient_text:
                # Text that is not UTF-8 (a damaged row) reads as text that fails its
                # checksum instead of failing the whole query.
                conn.text_factory = _lenient_text
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
            if self.read_only:
                self.schema_version = self._read_only_schema(conn)
            else:
                if self.path != MEMORY:
                    conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("PRAGMA synchronous = NORMAL")
                self.schema_version = migrate(self, self._migrations)
        except DRIVER_ERRORS as exc:
            conn.close()
            self._conn = None
            raise wrap(exc, self.path) from exc
        except BaseException:
            conn.close()
            self._conn = None
            raise

    def _read_only_schema(self, conn: sqlite3.Connection) -> int:
        """The schema version the file's rows are in; what an older schema lacks is
        shadowed (:func:`shadow_older_schema`), since a read-only file cannot be migrated."""
        latest = self._migrations[-1].version if self._migrations else 0
        recorded = conn.execute(
            "SELECT 1 FROM main.sqlite_master WHERE type = 'table' AND name = ?",
            ("statekeeper_migrations",),
        ).fetchone()
        current = recorded_version(conn, self.component) if recorded else 0
        check_version(self.path, self.component, current, latest)
        if current < latest:
            shadow_older_schema(conn, (s for m in self._migrations for s in m.statements))
        return current

    def _open(self) -> sqlite3.Connection:
        """A connection to the file: read-write (creating it and its directories), or
        read-only when asked or when the file is not writable."""
        if self.path == MEMORY:
            return self._sqlite(MEMORY, uri=False)  # empty, so "read-only" only refuses writes
        if Path(self.path).is_dir():  # else SQLite says "disk I/O error" or "unable to open"
            raise ConfigurationError(
                f"{self.path!r} is a directory, not a SQLite database file; name a file, "
                f"such as sqlite:///{Path(self.path) / 'state.db'}"
            )
        exists = Path(self.path).exists()
        if self.read_only and not exists:
            raise StorageNotFoundError(
                f"no database at {self.path!r} (opened read-only, so nothing was created); "
                "check the path, or open it read-write to create it"
            )
        if exists and not self.read_only and not _writable(self.path):
            self.read_only = True  # a read-only mount, a file of another user: reads work
            logger.debug("%s is not writable: opened read-only", self.path)
        if self.read_only:
            return self._sqlite(self._read_only_uri(), uri=True)
        parent = Path(self.path).parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(
                f"cannot create the directory {str(parent)!r} for the SQLite database: "
                f"{exc.strerror or exc}; check the path and its permissions"
            ) from exc
        return self._sqlite(self.path, uri=False)

    def _read_only_uri(self) -> str:
        """The ``mode=ro`` URI of the file. In a directory this process cannot write,
        SQLite cannot create the ``-shm`` file a WAL reader needs: if there is no ``-wal``
        either, every committed transaction is in the file itself, which is then opened
        ``immutable`` (checked again before each read, see :meth:`_connection`); a
        ``-wal`` without its ``-shm`` cannot be read there at all."""
        path = Path(self.path).absolute()
        wal = Path(f"{path}-wal").exists()
        self._immutable = False
        if not os.access(path.parent, os.W_OK):
            if wal and not Path(f"{path}-shm").exists():
                raise StorageError(
                    f"cannot read the SQLite database {self.path!r} on read-only storage: "
                    "its write-ahead log (-wal) holds transactions but its -shm file is "
                    "missing and cannot be created there; copy the database with its -wal "
                    "to writable storage and read it there"
                )
            self._immutable = not wal
        uri = f"file:{quote(str(path))}?mode=ro"
        return uri + "&immutable=1" if self._immutable else uri

    def _sqlite(self, target: str, *, uri: bool) -> sqlite3.Connection:
        try:
            return sqlite3.connect(
                target,
                timeout=self.busy_timeout,
                isolation_level=None,  # autocommit: transaction() owns BEGIN/COMMIT
                check_same_thread=False,  # use is serialised by self._lock
                uri=uri,
            )
        except DRIVER_ERRORS as exc:
            raise StorageError(f"cannot open SQLite database {self.path!r}: {exc}") from exc

    def check_open(self) -> None:
        """Raise :class:`StorageError` if :meth:`close` was called."""
        if self._closed:
            raise StorageError(
                f"the SQLite database {self.path!r} is closed; open a new checkpointer or store"
            )

    def _connection(self) -> sqlite3.Connection:
        self.check_open()
        if self._pid != os.getpid():
            # A forked child must never share the parent's connection (SQLite forbids it).
            self._pid = os.getpid()
            if self.path == MEMORY:
                raise StorageError("an in-memory SQLite database cannot be used after fork()")
            self._connect()
        elif self._immutable and Path(f"{self.path}-wal").exists():
            # Someone writes the file through another, writable path: read it as a WAL
            # reader from now on (or say why that is impossible).
            self._reconnect()
        assert self._conn is not None
        return self._conn

    def _reconnect(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self._connect()

    @contextmanager
    def transaction(self, *, write: bool) -> Iterator[sqlite3.Connection]:
        """Run the block in one transaction: committed if it returns, rolled back if it raises.

        ``write=True`` takes the write lock up front (``BEGIN IMMEDIATE``), waiting up to
        ``busy_timeout`` seconds for other writers; ``write=False`` reads one consistent
        snapshot. Transactions do not nest.

        Raises:
            ReadOnlyError: ``write`` on a read-only database.
        """
        if write and self.read_only:
            raise ReadOnlyError(
                f"cannot write to the SQLite database {self.path!r}: it is open read-only "
                "(mode=ro, or the file or its directory is not writable)"
            )
        with self._lock:
            conn = self._connection()
            try:
                conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            except DRIVER_ERRORS as exc:
                raise wrap(exc, self.path) from exc
            try:
                yield conn
            except DRIVER_ERRORS as exc:
                _rollback(conn)
                raise wrap(exc, self.path) from exc
            except BaseException:
                _rollback(conn)
                raise
            try:
                conn.commit()
            except DRIVER_ERRORS as exc:
                _rollback(conn)
                raise wrap(exc, self.path) from exc

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
        current = recorded_version(conn, db.component)
        check_version(db.path, db.component, current, latest)
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
        _rollback(conn)
        raise
    conn.commit()
    return latest


def recorded_version(conn: sqlite3.Connection, component: str) -> int:
    """The newest schema version recorded for ``component`` (0: none)."""
    row = conn.execute(
        "SELECT MAX(version) FROM statekeeper_migrations WHERE component = ?", (component,)
    ).fetchone()
    return int(row[0] or 0)


def check_version(path: str, component: str, current: int, latest: int) -> None:
    """Raise :class:`SchemaVersionError` if ``current`` is newer than ``latest``."""
    if current > latest:
        raise SchemaVersionError(
            f"the {component} schema in {path!r} is version {current}, written by a "
            f"newer statekeeper (this one understands up to version {latest}); "
            "upgrade statekeeper to open it"
        )


def wrap(exc: sqlite3.Error | UnicodeDecodeError, path: str) -> StorageError:
    """A ``sqlite3`` error as a :class:`StorageError` naming the file: damage SQLite
    found itself is a :class:`CorruptCheckpointError` (naming the file, not a row)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(exc, UnicodeDecodeError):
        message = exc.object.decode("utf-8", "replace") if isinstance(exc.object, bytes) else ""
        code = _CORRUPT  # SQLite's message quotes text that is not UTF-8: damage
    else:
        message = str(exc)
    if code is not None and (code & 0xFF == _CORRUPT or code == _SHORT_READ):
        damage = Damage(f"SQLite: {message}", backend="sqlite", path=path)
        return CorruptCheckpointError(
            f"the SQLite database {path!r} is damaged: {message} (found by SQLite); run "
            "verify() to list the damage, or restore a backup",
            damage,
        )
    if "locked" in message or "busy" in message:
        hint = "another process held the write lock too long; raise busy_timeout or retry"
    elif code == _NOT_A_DATABASE or "not a database" in message:
        hint = "the file is not a SQLite database or is corrupt; check the path"
    elif "readonly" in message or "read-only" in message:
        hint = "the file or its directory is not writable"
    elif message.startswith(("no such table", "no such column")):
        # the migrations recorded made them: something else dropped or altered them
        hint = (
            "the file is not a complete statekeeper database: its statekeeper tables were "
            "altered or dropped; restore it from a backup, or use a new file"
        )
    else:
        hint = "check the file, its directory and the disk"
    return StorageError(f"SQLite error on {path!r}: {message} ({hint})")


def _rollback(conn: sqlite3.Connection) -> None:
    # A damaged file can fail the rollback too: the error that caused it is the news.
    with suppress(*DRIVER_ERRORS):
        conn.rollback()


def _writable(path: str) -> bool:
    """Whether this process can write the database: the file, and the directory where
    SQLite creates its ``-wal`` and ``-shm`` files (``access`` also says no on a
    read-only mount, even to root)."""
    return os.access(path, os.W_OK) and os.access(Path(path).absolute().parent, os.W_OK)


def _lenient_text(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


def shadow_older_schema(conn: sqlite3.Connection, statements: Iterable[str]) -> None:
    """Shadow the tables of the schema ``statements`` build (every migration's, in order)
    that the file lacks, or lacks columns of, in ``conn``'s ``temp`` schema."""
    newest = sqlite3.connect(":memory:")  # the newest schema, to read its shape from
    try:
        for statement in statements:
            newest.execute(statement)
        tables = newest.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'table'"
        ).fetchall()
        virtual = {name for name, sql in tables if sql.upper().startswith("CREATE VIRTUAL")}
        existing = {
            name
            for (name,) in conn.execute("SELECT name FROM main.sqlite_master WHERE type = 'table'")
        }
        for name, sql in tables:
            if any(name.startswith(f"{table}_") for table in virtual):
                continue  # a virtual table's own storage (FTS5 shadow tables)
            if name in existing:
                wanted = [row[1] for row in newest.execute(f"PRAGMA table_info({_quoted(name)})")]
                _view(conn, name, wanted)
            elif name in virtual:
                conn.execute(sql.replace("CREATE VIRTUAL TABLE ", "CREATE VIRTUAL TABLE temp.", 1))
            else:
                conn.execute("CREATE TEMP TABLE" + sql[len("CREATE TABLE") :])
    finally:
        newest.close()


def _view(conn: sqlite3.Connection, table: str, wanted: list[str]) -> None:
    """Shadow ``table`` by a view with the ``wanted`` columns, those it lacks as NULL."""
    have = {row[1] for row in conn.execute(f"PRAGMA main.table_info({_quoted(table)})")}
    if set(wanted) <= have:
        return
    columns = ", ".join(
        _quoted(column) if column in have else f"NULL AS {_quoted(column)}" for column in wanted
    )
    name = _quoted(table)  # names and columns come from our own schema only
    conn.execute(f"CREATE TEMP VIEW {name} AS SELECT {columns} FROM main.{name}")  # noqa: S608


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
