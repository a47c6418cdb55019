"""What only the SQLite backend promises: schema migrations, storage layout, WAL and
locking settings, parameterised SQL, encryption at rest and safe deserialisation."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import operator
import re
import sqlite3
import threading
import time
import zlib
from collections.abc import Iterator
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, TypedDict

import ormsgpack
import pytest
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.graph import START, StateGraph
from pydantic import BaseModel

from statekeeper._storage.deltas import StoredValue
from statekeeper._storage.payload import ZLIB_DICT, encode, safe_serde
from statekeeper.backends.sqlite._database import Database
from statekeeper.backends.sqlite._integrity import value_crc
from statekeeper.backends.sqlite.checkpointer import MIGRATIONS, SqliteCheckpointer
from statekeeper.checkpointers import open_checkpointer
from statekeeper.checkpointers.semantics import matches
from statekeeper.errors import (
    ConfigurationError,
    CorruptCheckpointError,
    ReadOnlyError,
    SchemaVersionError,
    SerializationError,
    StorageError,
)

LATEST = MIGRATIONS[-1].version


def _put(saver: SqliteCheckpointer, thread: str, values: dict[str, Any], **meta: Any) -> dict:
    checkpoint = generate_checkpoint(channel_values=values)
    versions = {channel: saver.get_next_version(None, None) for channel in values}
    checkpoint["channel_versions"] = versions
    return saver.put(generate_config(thread), checkpoint, generate_metadata(**meta), versions)


@contextlib.contextmanager
def _sqlite(path: str | Path) -> Iterator[sqlite3.Connection]:
    """The database file opened with the standard ``sqlite3`` module, as another process
    or an operator would open it (autocommit: each statement is its own transaction)."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        yield conn
    finally:
        conn.close()


def _query(path: str | Path, sql: str) -> list[Any]:
    """The rows of one query on the database file (see :func:`_sqlite`)."""
    with _sqlite(path) as conn:
        return conn.execute(sql).fetchall()


def _migration_versions(path: Path) -> list[int]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute(
            "SELECT version FROM statekeeper_migrations WHERE component = 'checkpoints'"
            " ORDER BY version"
        ).fetchall()
    return [version for (version,) in rows]


# -- schema migrations ---------------------------------------------------------------


def test_new_database_is_at_the_latest_schema(tmp_path: Path) -> None:
    SqliteCheckpointer(str(tmp_path / "s.db")).close()
    assert _migration_versions(tmp_path / "s.db") == [m.version for m in MIGRATIONS]


def test_older_database_is_upgraded_once_and_keeps_its_data(tmp_path: Path) -> None:
    """A file written at schema version 1 (rows in that version's shape) is upgraded to the
    latest on open, loads exactly, takes new writes, and a second open has nothing to do."""
    path = tmp_path / "old.db"
    Database(path, component="checkpoints", migrations=MIGRATIONS[:1]).close()
    serde = safe_serde()
    version = json.dumps("00000000000000000000000000000001.5")
    checkpoint = generate_checkpoint(checkpoint_id="1ef00000-0000-6000-8000-000000000001")
    checkpoint["channel_versions"] = {"messages": json.loads(version)}
    stripped = {k: v for k, v in checkpoint.items() if k != "channel_values"}
    with sqlite3.connect(path) as conn:
        conn.execute(
            "INSERT INTO blobs VALUES ('t', '', 'messages', ?, ?, ?, ?)",
            (version, *encode(serde, ["hello", "world"], compress=False)),
        )
        conn.execute(
            "INSERT INTO checkpoints VALUES ('t', '', ?, NULL, 'run-1', ?, ?, ?, ?, ?)",
            (
                checkpoint["id"],
                *encode(serde, stripped, compress=False),
                json.dumps({"source": "loop", "step": 0, "run_id": "run-1"}),
                json.dumps({"messages": version}),
            ),
        )
    assert _migration_versions(path) == [1]
    for _ in range(2):  # the second open has nothing left to do
        with SqliteCheckpointer(str(path)) as saver:
            loaded = saver.get_tuple(generate_config("t"))
            assert loaded is not None
            assert loaded.checkpoint["channel_values"] == {"messages": ["hello", "world"]}
            assert loaded.metadata["run_id"] == "run-1"
            assert [t.checkpoint["id"] for t in saver.list(None, filter={"step": 0})] == [
                checkpoint["id"]
            ]
        assert _migration_versions(path) == [m.version for m in MIGRATIONS]
    with SqliteCheckpointer(str(path)) as saver:
        _put(saver, "t2", {"a": "new"})
        saver.delete_for_runs(["run-1"])  # uses the index migration 2 added
        assert saver.get_tuple(generate_config("t")) is None
    with sqlite3.connect(path) as conn:
        indexes = {name for (name,) in conn.execute("SELECT name FROM sqlite_master")}
    assert {"checkpoints_newest", "checkpoints_thread_newest", "checkpoints_run"} <= indexes


def _version_1_database(path: Path) -> str:
    """A file at schema version 1 with one checkpoint (with a pending write) and its value,
    in that version's row shapes; returns the checkpoint id."""
    Database(path, component="checkpoints", migrations=MIGRATIONS[:1]).close()
    serde = safe_serde()
    version = json.dumps("00000000000000000000000000000001.5")
    checkpoint = generate_checkpoint(checkpoint_id="1ef00000-0000-6000-8000-000000000001")
    checkpoint["channel_versions"] = {"messages": json.loads(version)}
    stripped = {k: v for k, v in checkpoint.items() if k != "channel_values"}
    with sqlite3.connect(path) as conn:
        conn.execute(
            "INSERT INTO blobs VALUES ('t', '', 'messages', ?, ?, ?, ?)",
            (version, *encode(serde, ["hello", "world"], compress=False)),
        )
        conn.execute(
            "INSERT INTO checkpoints VALUES ('t', '', ?, NULL, 'run-1', ?, ?, ?, ?, ?)",
            (
                checkpoint["id"],
                *encode(serde, stripped, compress=False),
                json.dumps({"source": "loop", "step": 0, "run_id": "run-1"}),
                json.dumps({"messages": version}),
            ),
        )
        conn.execute(
            "INSERT INTO writes VALUES ('t', '', ?, 'task', 0, 'messages', '', ?, ?, ?)",
            (checkpoint["id"], *encode(serde, ["again"], compress=False)),
        )
    return str(checkpoint["id"])


def _row_counts(path: Path) -> list[int]:
    return [
        _query(path, f"SELECT COUNT(*) FROM {table}")[0][0]
        for table in ("checkpoints", "blobs", "writes")
    ]


def test_rows_written_before_checksums_are_reported_until_repair_checksums_them(
    tmp_path: Path,
) -> None:
    """The upgrade adds checksum columns without rewriting a row; such rows read as
    before, verify() reports them as unverified, and verify(repair=True) checksums them
    (changing nothing else), after which damage to them is detected like any other."""
    path = tmp_path / "old.db"
    checkpoint_id = _version_1_database(path)
    with SqliteCheckpointer(str(path)) as saver:
        loaded = saver.get_tuple(generate_config("t"))
        assert loaded is not None
        assert loaded.checkpoint["channel_values"] == {"messages": ["hello", "world"]}
        assert loaded.pending_writes == [("task", "messages", ["again"])]
        found = saver.verify()
        assert sorted((d.record, d.thread_id) for d in found) == [
            ("checkpoint", "t"),
            ("value", "t"),
            ("writes", "t"),
        ]
        assert all("written before checksums existed" in d.reason for d in found)
        counts = _row_counts(path)
        repaired = saver.verify(repair=True)
        assert [d.reason.endswith("[checksummed now]") for d in repaired] == [True] * 3
        assert saver.verify() == []
        assert _row_counts(path) == counts
        assert saver.get_tuple(generate_config("t")) == loaded
    with _sqlite(path) as conn:  # now a change to the row is damage, as in a new database
        conn.execute("UPDATE checkpoints SET metadata = replace(metadata, '0', '1')")
    with (
        SqliteCheckpointer(str(path)) as saver,
        pytest.raises(CorruptCheckpointError, match=checkpoint_id) as caught,
    ):
        saver.get_tuple(generate_config("t"))
    assert caught.value.record == "metadata"


def test_a_row_without_a_checksum_in_a_database_that_never_had_one_is_damage(
    tmp_path: Path,
) -> None:
    with SqliteCheckpointer(str(tmp_path / "s.db")) as saver:
        stored = _put(saver, "t", {"a": 1})
        with _sqlite(saver.path) as conn:
            conn.execute("UPDATE checkpoints SET crc = NULL")
        with pytest.raises(CorruptCheckpointError, match="does not match its checksum"):
            saver.get_tuple(stored)
        saver.verify(repair=True)  # repair does not bless it
        with pytest.raises(CorruptCheckpointError, match="does not match its checksum"):
            saver.get_tuple(stored)


def test_repair_rebuilds_digests_and_heads_from_the_rows_stored_and_deletes_nothing(
    tmp_path: Path,
) -> None:
    with SqliteCheckpointer(str(tmp_path / "s.db")) as saver:
        first = _put(saver, "t", {"a": 1})
        saver.put_writes(first, [("a", 2), ("a", 3)], "task")
        second = _put(saver, "t", {"a": 4})
        with _sqlite(saver.path) as conn:
            conn.execute("DELETE FROM writes WHERE idx = 1")  # a lost write
            conn.execute(
                "DELETE FROM checkpoints WHERE checkpoint_id = ?",
                (second["configurable"]["checkpoint_id"],),
            )
        with pytest.raises(CorruptCheckpointError, match="pending writes"):
            saver.get_tuple(first)
        with pytest.raises(CorruptCheckpointError, match="missing"):
            saver.get_tuple(generate_config("t"))
        counts = _row_counts(Path(saver.path))
        repaired = saver.verify(repair=True)
        assert sorted(d.record for d in repaired) == ["checkpoint", "writes"]
        assert all("rebuilt from" in d.reason for d in repaired)
        assert saver.verify() == []
        assert _row_counts(Path(saver.path)) == counts
        loaded = saver.get_tuple(generate_config("t"))  # the thread goes on from what is left
        assert loaded is not None
        assert loaded.pending_writes == [("task", "a", 2)]


def test_database_from_a_newer_version_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    with SqliteCheckpointer(str(path)) as saver:
        _put(saver, "t", {"a": 1})
    with sqlite3.connect(path) as conn:
        conn.execute(
            "INSERT INTO statekeeper_migrations VALUES ('checkpoints', ?, 'future', 'later')",
            (LATEST + 1,),
        )
    before = path.read_bytes()
    with pytest.raises(SchemaVersionError, match=f"version {LATEST + 1}.*upgrade statekeeper"):
        SqliteCheckpointer(str(path))
    assert path.read_bytes() == before


@pytest.mark.parametrize("table", ["heads", "checkpoints"])
@pytest.mark.parametrize("mode", ["rw", "ro"])
def test_a_table_dropped_behind_statekeeper_says_the_database_is_incomplete(
    tmp_path: Path, table: str, mode: str
) -> None:
    """Before: "no such table: heads (see the cause above)", where no cause is shown."""
    path = tmp_path / "state.db"
    with SqliteCheckpointer(str(path)) as saver:
        _put(saver, "t", {"a": 1})
    with _sqlite(path) as conn:
        conn.execute(f"DROP TABLE {table}")
    with SqliteCheckpointer(str(path), mode=mode) as saver:
        for call in (lambda: saver.get_tuple(generate_config("t")), saver.verify):
            with pytest.raises(StorageError, match=f"no such table: {table}") as info:
                call()
            assert "not a complete statekeeper database" in str(info.value)
            assert "cause above" not in str(info.value)


def test_is_empty_database_only_without_a_single_table(tmp_path: Path) -> None:
    """A 0-byte file opened read-only has no table (SQLite's empty database); a read-write
    open creates statekeeper's, and a database with them is not empty, with threads or
    none. A database holding only other tables is not empty either."""
    path = tmp_path / "empty.db"
    path.write_bytes(b"")
    with SqliteCheckpointer(str(path), mode="ro") as saver:
        assert saver.is_empty_database()
    assert path.read_bytes() == b""  # asking created nothing
    with SqliteCheckpointer(str(path)) as saver:
        assert not saver.is_empty_database()
    with SqliteCheckpointer(str(path), mode="ro") as saver:
        assert not saver.is_empty_database()
    with SqliteCheckpointer() as saver:
        _put(saver, "t", {"a": 1})
        assert not saver.is_empty_database()
    other = tmp_path / "other.db"
    with _sqlite(other) as conn:
        conn.execute("CREATE TABLE mine (x)")
    with SqliteCheckpointer(str(other), mode="ro") as saver:
        assert not saver.is_empty_database()


def test_a_file_that_is_not_a_database_gets_a_clear_error_and_is_not_modified(
    tmp_path: Path,
) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(b"these are my notes, not a database\n" * 200)
    before = path.read_bytes()
    with pytest.raises(StorageError, match="not a SQLite database or is corrupt"):
        SqliteCheckpointer(str(path))
    assert path.read_bytes() == before


def test_unwritable_location_gets_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StorageError, match="cannot create the directory"):
        SqliteCheckpointer(str(blocker / "sub" / "s.db"))


def test_closed_checkpointer_says_so(tmp_path: Path) -> None:
    saver = SqliteCheckpointer(str(tmp_path / "s.db"))
    saver.close()
    saver.close()  # idempotent
    with pytest.raises(StorageError, match="closed"):
        saver.get_tuple(generate_config("t"))


# -- settings and layout ---------------------------------------------------------------


def test_wal_and_busy_timeout_are_set(tmp_path: Path) -> None:
    """The file is in WAL mode, and a writer waits ``busy_timeout`` seconds for another
    process's write lock: it gets the lock if it is released in time, else a clear
    StorageError once that time is up (not at once, and not after the default 30 s)."""
    path = tmp_path / "s.db"
    with SqliteCheckpointer(str(path), busy_timeout=0.5) as saver, _sqlite(path) as other:
        _put(saver, "t", {"a": 1})
        assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        other.execute("BEGIN IMMEDIATE")  # another process takes the write lock
        started = time.monotonic()
        with pytest.raises(StorageError, match=r"database is locked.*raise busy_timeout"):
            _put(saver, "t", {"a": 2})
        waited = time.monotonic() - started
        other.rollback()
        assert 0.45 <= waited < 10
    with SqliteCheckpointer(str(path), busy_timeout=20) as saver, _sqlite(path) as other:
        other.execute("BEGIN IMMEDIATE")
        release = threading.Timer(0.3, other.rollback)
        release.start()
        try:
            started = time.monotonic()
            _put(saver, "t", {"a": 3})  # waits for the lock instead of failing
            assert time.monotonic() - started >= 0.25
        finally:
            release.join()
        assert saver.get_tuple(generate_config("t")).checkpoint["channel_values"] == {"a": 3}


class Chat(TypedDict):
    messages: Annotated[list[str], operator.add]
    topic: str
    turns: int


def _chat_graph(saver: Any) -> Any:
    def reply(state: Chat) -> dict[str, Any]:
        return {"messages": [f"reply {state['turns']}"], "turns": state["turns"] + 1}

    builder = StateGraph(Chat)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    return builder.compile(checkpointer=saver)


def test_each_channel_value_is_stored_once_per_version(tmp_path: Path) -> None:
    with SqliteCheckpointer(str(tmp_path / "s.db")) as saver:
        graph = _chat_graph(saver)
        config = {"configurable": {"thread_id": "chat"}}
        graph.invoke({"messages": ["hi"], "topic": "weather", "turns": 0}, config)
        for _ in range(9):
            graph.invoke({"messages": ["more"]}, config)
        [(topic_rows,)] = _query(saver.path, "SELECT COUNT(*) FROM blobs WHERE channel = 'topic'")
        [(message_rows,)] = _query(
            saver.path, "SELECT COUNT(*) FROM blobs WHERE channel = 'messages'"
        )
        [(checkpoints,)] = _query(saver.path, "SELECT COUNT(*) FROM checkpoints")
        history = list(graph.get_state_history(config))
    assert checkpoints == len(history) == 30
    # "topic" was written once and never changed: one row serves all 30 checkpoints.
    assert topic_rows == 1
    # "messages" changes twice per turn (the input, then the reply).
    assert message_rows == 20
    assert all(s.values["topic"] == "weather" for s in history if s.metadata["step"] >= 0)
    assert history[0].values["messages"][-1] == "reply 9"


def test_large_values_are_compressed_and_read_back_exactly(tmp_path: Path) -> None:
    text = " ".join(f"word{i % 97}" for i in range(20_000))
    with SqliteCheckpointer(str(tmp_path / "s.db")) as saver:
        stored = _put(saver, "t", {"doc": text})
        [(codec, size)] = _query(saver.path, "SELECT codec, LENGTH(blob) FROM blobs")
        loaded = saver.get_tuple(stored)
    assert codec == ZLIB_DICT
    assert size < len(text) / 3
    assert loaded is not None
    assert loaded.checkpoint["channel_values"]["doc"] == text


# -- security ----------------------------------------------------------------------------


HOSTILE_KEYS = [
    "a') OR 1=1 --",
    "$.source') OR ('1'='1",
    'x" OR "1"="1',
    "source; DROP TABLE checkpoints; --",
    "$[0]",
    "*",
]


def _trace_sql(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every statement run on the connections the standard ``sqlite3`` module opens from
    now on (a checkpointer's among them), as its trace callback shows them: with the bound
    literals expanded. Tracing the module is how the SQL a checkpointer sends is seen
    from outside it."""
    statements: list[str] = []
    connect = sqlite3.connect

    def traced(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = connect(*args, **kwargs)
        conn.set_trace_callback(statements.append)
        return conn

    monkeypatch.setattr(sqlite3, "connect", traced)
    return statements


def _sql_shapes(saver: SqliteCheckpointer, traced: list[str], filter: dict[str, Any]) -> list[str]:
    """The statements ``list(None, filter=filter)`` runs, with every bound literal (which
    sqlite3's trace shows expanded) replaced by ``?``: what the SQL text itself is."""
    traced.clear()
    list(saver.list(None, filter=filter))
    literal = re.compile(r"'(?:[^']|'')*'|X'[0-9A-Fa-f]*'|-?\b\d+(?:\.\d+)?\b")
    return [literal.sub("?", statement) for statement in traced]


@pytest.mark.parametrize("key", HOSTILE_KEYS)
def test_metadata_filter_keys_are_never_spliced_into_sql(
    tmp_path: Path, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    traced = _trace_sql(monkeypatch)
    with SqliteCheckpointer(str(tmp_path / "s.db")) as saver:
        _put(saver, "t1", {"a": 1}, source="loop")
        _put(saver, "t2", {"a": 2}, **{key: "yes"})
        matched = list(saver.list(None, filter={key: "yes"}))
        assert [t.config["configurable"]["thread_id"] for t in matched] == ["t2"]
        assert list(saver.list(None, filter={key: "no"})) == []
        assert len(list(saver.list(None))) == 2  # nothing was dropped
        # The key and value travel only as parameters: the SQL is the same as for a
        # harmless key, once the bound literals are masked.
        hostile = _sql_shapes(saver, traced, {key: "'; DROP TABLE writes; --"})
        assert hostile
        assert hostile == _sql_shapes(saver, traced, {"plain": "value"})


def _aes_serde() -> EncryptedSerializer:
    return EncryptedSerializer.from_pycryptodome_aes(key=b"0123456789abcdef0123456789abcdef")


def test_encrypted_serde_leaves_no_value_in_plaintext(tmp_path: Path) -> None:
    path = tmp_path / "secret.db"
    secret = "the launch code is PLAINTEXT-CANARY-4242"
    with SqliteCheckpointer(str(path), serde=_aes_serde()) as saver:
        stored = _put(saver, "t", {"note": secret, "big": secret * 100})
        saver.put_writes(stored, [("note", secret)], "task-1")
        loaded = saver.get_tuple(stored)
        assert loaded is not None
        assert loaded.checkpoint["channel_values"]["note"] == secret
        assert loaded.pending_writes == [("task-1", "note", secret)]
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir())
    assert b"PLAINTEXT-CANARY" not in raw
    assert b"PLAINTEXT-CANARY".hex().encode() not in raw


def test_reading_with_the_wrong_key_fails_clearly(tmp_path: Path) -> None:
    path = str(tmp_path / "secret.db")
    with SqliteCheckpointer(path, serde=_aes_serde()) as saver:
        stored = _put(saver, "t", {"note": "hello"})
    wrong = EncryptedSerializer.from_pycryptodome_aes(key=b"X" * 32)
    with (
        SqliteCheckpointer(path, serde=wrong) as saver,
        pytest.raises(SerializationError, match=r"cannot deserialise.*another serde"),
    ):
        saver.get_tuple(stored)


def _forge_values(path: str, type_: str, payload: bytes) -> None:
    """Replace every stored value by ``payload`` of type ``type_``, with checksums that
    match: an attacker who can write the file can compute them too (a checksum finds
    damage, it does not authenticate)."""
    with _sqlite(path) as conn:
        for thread_id, ns, channel, version in conn.execute(
            "SELECT thread_id, checkpoint_ns, channel, version FROM blobs"
        ).fetchall():
            forged = StoredValue(channel, version, type_, "", payload, None, zlib.crc32(payload))
            conn.execute(
                "UPDATE blobs SET type = ?, codec = '', blob = ?, base_version = NULL, crc = ?,"
                " row_crc = ? WHERE thread_id = ? AND checkpoint_ns = ? AND channel = ?"
                " AND version = ?",
                (
                    type_,
                    payload,
                    forged.crc,
                    value_crc(thread_id, ns, forged),
                    thread_id,
                    ns,
                    channel,
                    version,
                ),
            )


def test_hostile_stored_bytes_cannot_run_code(tmp_path: Path) -> None:
    """A crafted checkpoint naming os.system must not execute when loaded."""
    canary = tmp_path / "pwned"
    payload = ormsgpack.packb(
        ormsgpack.Ext(0, ormsgpack.packb(["os", "system", f"touch {canary}"]))
    )
    with SqliteCheckpointer(str(tmp_path / "s.db")) as saver:
        stored = _put(saver, "t", {"a": "harmless"})
        _forge_values(saver.path, "msgpack", payload)
        loaded = saver.get_tuple(stored)
    assert not canary.exists()
    assert loaded is not None
    assert loaded.checkpoint["channel_values"]["a"] == f"touch {canary}"  # inert data


def test_pickled_payloads_are_refused(tmp_path: Path) -> None:
    import pickle

    with SqliteCheckpointer(str(tmp_path / "s.db")) as saver:
        stored = _put(saver, "t", {"a": "x"})
        _forge_values(saver.path, "pickle", pickle.dumps("x"))
        with pytest.raises(
            SerializationError, match="cannot deserialise a stored 'pickle' payload"
        ):
            saver.get_tuple(stored)


def test_hostile_bytes_cannot_construct_non_data_classes(tmp_path: Path) -> None:
    """subprocess.Popen is a class, but not a data class: it must never be called."""
    canary = tmp_path / "popen-ran"
    payload = ormsgpack.packb(
        ormsgpack.Ext(1, ormsgpack.packb(["subprocess", "Popen", [["touch", str(canary)]]]))
    )
    with SqliteCheckpointer(str(tmp_path / "s.db")) as saver:
        stored = _put(saver, "t", {"a": "harmless"})
        _forge_values(saver.path, "msgpack", payload)
        saver.get_tuple(stored)
    assert not canary.exists()


class Point(BaseModel):
    x: int
    y: int


@dataclasses.dataclass
class Box:
    label: str
    points: list[Point]


class Colour(Enum):
    RED = "red"


def test_data_classes_of_loaded_modules_round_trip_without_an_allowlist(tmp_path: Path) -> None:
    value = {"box": Box("b", [Point(x=1, y=2)]), "colour": Colour.RED, "p": Point(x=3, y=4)}
    with SqliteCheckpointer(str(tmp_path / "s.db")) as saver:
        stored = _put(saver, "t", {"v": value})
        loaded = saver.get_tuple(stored)
    assert loaded is not None
    assert loaded.checkpoint["channel_values"]["v"] == value


# -- append deltas -------------------------------------------------------------------


def _grow(saver: SqliteCheckpointer, thread: str, turns: int) -> list[dict]:
    """A chain of checkpoints whose "log" channel grows by one entry per checkpoint."""
    configs: list[dict] = []
    version = None
    for turn in range(turns):
        version = saver.get_next_version(version, None)
        checkpoint = generate_checkpoint(
            channel_values={"log": [f"entry {i}?" for i in range(turn + 1)]}
        )
        checkpoint["channel_versions"] = {"log": version}
        config = generate_config(thread)
        if configs:
            config["configurable"]["checkpoint_id"] = configs[-1]["configurable"]["checkpoint_id"]
        configs.append(
            saver.put(
                config,
                checkpoint,
                generate_metadata(step=turn, run_id=f"r{turn}"),
                {"log": version},
            )
        )
    return configs


def _codecs(saver: SqliteCheckpointer) -> list[str]:
    """The codec of every stored value, a delta's as ``append`` (compressed or not)."""
    rows = _query(saver.path, "SELECT codec FROM blobs ORDER BY version")
    return [codec.split("+")[0] for (codec,) in rows]


def _logs(saver: SqliteCheckpointer, configs: list[dict]) -> list[list[str] | None]:
    loaded = [saver.get_tuple(config) for config in configs]
    return [t.checkpoint["channel_values"]["log"] if t else None for t in loaded]


def test_growing_lists_are_stored_as_deltas_and_read_back_exactly(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    with SqliteCheckpointer(path) as saver:
        configs = _grow(saver, "t", 40)
        codecs = _codecs(saver)
    assert codecs.count("append") == 39  # skip-deltas on the one full copy
    assert codecs.count("") == 1
    expected = [[f"entry {i}?" for i in range(turn + 1)] for turn in range(40)]
    with SqliteCheckpointer(path) as reopened:  # no in-process memory of what was written
        assert _logs(reopened, configs) == expected
        assert [t.checkpoint["channel_values"]["log"] for t in reopened.list(None)] == expected[
            ::-1
        ]


def test_prune_and_run_deletion_keep_the_bases_survivors_need(tmp_path: Path) -> None:
    with SqliteCheckpointer(str(tmp_path / "s.db")) as saver:
        configs = _grow(saver, "t", 30)
        saver.delete_for_runs([f"r{turn}" for turn in range(29)])
        assert _logs(saver, configs[-1:]) == [[f"entry {i}?" for i in range(30)]]
        saver.prune(["t"], strategy="keep_latest")
        assert _logs(saver, configs[-1:]) == [[f"entry {i}?" for i in range(30)]]
        [(remaining,)] = _query(saver.path, "SELECT COUNT(*) FROM blobs")
        # the survivor's skip chain back to its full copy (29, 131 in base 4: on 28, 24,
        # 20, 16 and 0)
        assert remaining == 6


def test_a_base_deleted_by_another_process_is_never_built_on(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    with SqliteCheckpointer(path) as writer, SqliteCheckpointer(path) as other:
        _grow(writer, "t", 3)
        other.delete_thread("t")
        configs = _grow(writer, "t", 5)  # remembers the deleted base, must not use it
        with SqliteCheckpointer(path) as reader:
            assert _logs(reader, configs) == [
                [f"entry {i}?" for i in range(turn + 1)] for turn in range(5)
            ]


def test_overwriting_a_base_version_keeps_the_values_built_on_it(tmp_path: Path) -> None:
    with SqliteCheckpointer(str(tmp_path / "s.db")) as saver:
        configs = _grow(saver, "t", 3)
        first = saver.get_tuple(configs[0])
        assert first is not None
        version = first.checkpoint["channel_versions"]["log"]
        checkpoint = generate_checkpoint(channel_values={"log": ["rewritten"]})
        checkpoint["channel_versions"] = {"log": version}
        saver.put(generate_config("t"), checkpoint, generate_metadata(), {"log": version})
        assert _logs(saver, configs[1:]) == [
            ["entry 0?", "entry 1?"],
            ["entry 0?", "entry 1?", "entry 2?"],
        ]


def test_a_corrupt_delta_is_detected_not_returned(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    with SqliteCheckpointer(path) as saver:
        configs = _grow(saver, "t", 3)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE blobs SET blob = X'01910000' WHERE codec = 'append'")
    with (
        SqliteCheckpointer(path) as saver,
        pytest.raises(CorruptCheckpointError, match=r"corrupt \(checksum mismatch\)") as caught,
    ):
        saver.get_tuple(configs[-1])
    assert (caught.value.record, caught.value.thread_id) == ("delta", "t")


def test_listing_a_history_rebuilds_each_version_once(tmp_path: Path, monkeypatch) -> None:
    from statekeeper._storage import deltas as _deltas

    calls: list[int] = []
    original = _deltas.apply_delta

    def counting(base: bytes, delta: bytes) -> bytes:
        calls.append(1)
        return original(base, delta)

    path = str(tmp_path / "s.db")
    with SqliteCheckpointer(path) as saver:
        _grow(saver, "t", 40)
    monkeypatch.setattr(_deltas, "apply_delta", counting)
    with SqliteCheckpointer(path) as reader:  # nothing remembered: every delta is read
        assert len(list(reader.list(None))) == 40
    assert len(calls) == 39  # one per stored delta, not one per delta per checkpoint


# -- declared metadata indexes (index_metadata) ------------------------------------------

# every kind of value a filter may ask for: those the index selects by, and those it
# leaves to a scan (floats, NUL, objects, lists, ints beyond 64 bits)
INDEX_VALUES = ["u1", "1", "", 1, 0, 1.0, 0.1, True, False, None, {"a": 1}, [1], 2**70, "a\x00b"]


def _fill_metadata(saver: SqliteCheckpointer, count: int = 70) -> None:
    """``count`` checkpoints over four threads, every 5th without a ``user`` key."""
    for i in range(count):
        meta: dict[str, Any] = {"step": i}
        if i % 5:
            meta["user"] = INDEX_VALUES[i % len(INDEX_VALUES)]
        _put(saver, f"t{i % 4}", {}, **meta)


@pytest.mark.parametrize("value", INDEX_VALUES, ids=repr)
def test_a_filter_on_an_indexed_key_lists_what_a_scan_finds(tmp_path: Path, value: Any) -> None:
    with SqliteCheckpointer(str(tmp_path / "s.db")) as saver:
        saver.index_metadata("user")
        _fill_metadata(saver)
        wanted = {"user": value}
        everything = list(saver.list(None))
        expected = [t.config for t in everything if matches(t.metadata, wanted)]
        assert expected  # every value is stored (or, for None, missing) somewhere
        assert [t.config for t in saver.list(None, filter=wanted)] == expected
        assert [t.config for t in saver.list(None, filter=wanted, limit=2)] == expected[:2]
        below = {"configurable": {**expected[0]["configurable"]}}
        after = [t.config for t in saver.list(None, filter=wanted, before=below)]
        assert after == expected[1:]
        one = [t.config for t in saver.list(generate_config("t1"), filter=wanted)]
        assert one == [c for c in expected if c["configurable"]["thread_id"] == "t1"]


def test_an_indexed_filter_reads_its_index_not_the_table(tmp_path: Path) -> None:
    from statekeeper.backends.sqlite._queries import list_where, page_query

    path = tmp_path / "s.db"
    with open_checkpointer(f"sqlite:///{path}?index_metadata=user,tenant") as saver:
        _fill_metadata(saver, 10)
    for value, used in (("u1", True), (7, True), (True, True), (None, True), (0.5, False)):
        where, params = list_where(None, {"user": value}, None, frozenset({"user"}))
        sql, args = page_query(where, params, ("z", "z", "z"))  # what a listing's page runs
        with _sqlite(path) as conn:
            found = conn.execute(f"EXPLAIN QUERY PLAN {sql}", (*args, 10)).fetchall()
        plan = " ".join(row[3] for row in found)
        assert ("USING INDEX checkpoints_meta_user" in plan) is used, (value, plan)
        if used:  # newest first straight from the index: no sorting step
            assert "TEMP B-TREE" not in plan, plan


def test_declared_indexes_stay_and_serve_later_openings(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    with SqliteCheckpointer(path) as saver:
        _fill_metadata(saver, 20)  # written before any index exists
    with open_checkpointer(f"sqlite:///{path}", index_metadata=["user"]):
        pass
    with _sqlite(path) as conn:
        names = {n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type='index'")}
    assert "checkpoints_meta_user" in names
    for mode in ("rw", "ro"):  # not declared again: the index is used all the same
        with SqliteCheckpointer(path, mode=mode) as saver:
            expected = [t.config for t in saver.list(None) if t.metadata.get("user") == "1"]
            assert expected
            assert [t.config for t in saver.list(None, filter={"user": "1"})] == expected


def test_a_read_only_opening_creates_no_index(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    with SqliteCheckpointer(path) as saver:
        _fill_metadata(saver, 10)
    before = Path(path).read_bytes()
    with open_checkpointer(f"sqlite:///{path}?mode=ro&index_metadata=user") as saver:
        assert len(list(saver.list(None, filter={"user": "1"}))) == 1
        with pytest.raises(ReadOnlyError):
            saver.index_metadata("user")
    assert Path(path).read_bytes() == before


@pytest.mark.parametrize("keys", ["1user", "user-id", "a b", "x" * 65, "ü", ["ok", ""], [3]])
def test_index_keys_that_are_not_plain_names_are_refused(tmp_path: Path, keys: Any) -> None:
    with (
        SqliteCheckpointer(str(tmp_path / "s.db")) as saver,
        pytest.raises(ConfigurationError, match="index_metadata takes metadata keys"),
    ):
        saver.index_metadata(*([keys] if isinstance(keys, str) else keys))
    with pytest.raises(ConfigurationError, match="index_metadata takes metadata keys"):
        open_checkpointer(f"sqlite:///{tmp_path}/u.db", index_metadata=keys)
    assert not (tmp_path / "u.db").exists()


@pytest.mark.parametrize("busy_timeout", [float("inf"), float("-inf"), float("nan"), 2_147_484])
def test_a_busy_timeout_sqlite_cannot_wait_is_refused_before_opening(
    tmp_path: Path, busy_timeout: float
) -> None:
    """Infinity used to raise OverflowError, NaN ValueError; a finite timeout over 2**31 - 1
    ms was taken, and SQLite then waited for no lock at all (its busy timeout wrapped to 0)."""
    for url in ("memory://", f"sqlite:///{tmp_path}/b.db"):
        with pytest.raises(ConfigurationError, match="busy_timeout must be a finite number"):
            open_checkpointer(url, busy_timeout=busy_timeout)
        with pytest.raises(ConfigurationError, match="busy_timeout must be a finite number"):
            open_checkpointer(f"{url}{'&' if '?' in url else '?'}busy_timeout={busy_timeout}")
    with pytest.raises(ConfigurationError, match="finite number of seconds >= 0"):
        Database(
            ":memory:", component="checkpoints", migrations=MIGRATIONS, busy_timeout=busy_timeout
        )
    assert not list(tmp_path.iterdir())


def test_the_longest_busy_timeout_is_the_one_sqlite_waits(tmp_path: Path) -> None:
    with (
        open_checkpointer(f"sqlite:///{tmp_path}/b.db?busy_timeout=2147483") as saver,
        saver._db.transaction(write=False) as conn,
    ):
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 2_147_483_000
