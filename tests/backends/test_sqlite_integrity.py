"""SQLite: damage to a database is never silent.

A database written by a chat graph (values stored whole and as append deltas, pending
writes of an interrupted step) is damaged, one trial at a time, and read back whole:
every thread's newest checkpoint, its full history, every checkpoint's writes, the
graph's state, and the global listing. A read must return exactly what was stored or
raise a ``StatekeeperError`` (``CorruptCheckpointError``, or ``StorageError`` for what
SQLite itself finds); nothing else may escape; and ``verify()`` must report the damage.

Damage is placed by reading SQLite's file format (:func:`_cells`): bit flips inside the
bytes of each record kind (checkpoint rows, their metadata, pending writes, values,
append deltas, head records, index entries), in b-tree structure (page headers, cell
pointers, cell headers), truncations at any byte and at page boundaries, and deleted
rows. Trials are drawn from a seeded generator (``SEED``) over the file's structure (the
n-th cell of a kind, the n-th byte in it); the written bytes themselves differ from run to
run (checkpoint ids hold the time), so a failure names its trial and the damaged file,
which pytest keeps in its temporary directory to be read again.
"""

from __future__ import annotations

import operator
import random
import re
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from statekeeper.backends.sqlite.checkpointer import SqliteCheckpointer
from statekeeper.errors import CorruptCheckpointError, StatekeeperError, StorageError

SEED = 20_240_915
THREADS = ("chat-0", "chat-1")


class Chat(TypedDict):
    messages: Annotated[list[str], operator.add]
    topic: str
    turns: int


def _graph(saver: Any) -> Any:
    def reply(state: Chat) -> dict[str, Any]:
        return {"messages": [f"reply {state['turns']} " + "w" * 30], "turns": state["turns"] + 1}

    def ask(state: Chat) -> dict[str, Any]:
        if state["turns"] >= 3:  # the last turn stops here: its writes are pending
            return {"messages": [f"answer {interrupt('go on?')}"]}
        return {}

    builder = StateGraph(Chat)
    builder.add_node("reply", reply)
    builder.add_node("ask", ask)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", "ask")
    builder.add_edge("ask", END)
    return builder.compile(checkpointer=saver)


def _config(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


def _write(path: Path) -> None:
    with SqliteCheckpointer(str(path)) as saver:
        graph = _graph(saver)
        for thread_id in THREADS:
            graph.invoke({"messages": ["hi"], "topic": "weather", "turns": 0}, _config(thread_id))
            for turn in range(2):
                graph.invoke({"messages": [f"more {turn}"]}, _config(thread_id))
    with sqlite3.connect(path) as conn:  # everything in the file itself, as a copy has it
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("PRAGMA journal_mode = DELETE")


def _read_all(path: Path, *, on_corrupt: str = "raise") -> dict[str, Any]:
    """Everything a reader can ask for, in comparable form."""
    found: dict[str, Any] = {}
    with SqliteCheckpointer(str(path), on_corrupt=on_corrupt) as saver:
        graph = _graph(saver)
        for thread_id in THREADS:
            config = _config(thread_id)
            latest = saver.get_tuple(config)
            history = list(saver.list(config))
            state = graph.get_state(config)
            found[thread_id] = (
                latest and (latest.checkpoint, latest.metadata, latest.pending_writes),
                [(t.checkpoint, t.metadata, t.pending_writes, t.parent_config) for t in history],
                [saver.get_writes(t.config) for t in history],
                (state.values, state.next),
            )
        found["all"] = [t.config for t in saver.list(None)]
    return found


@dataclass(frozen=True)
class Written:
    path: Path
    data: bytes
    truth: dict[str, Any]
    cells: dict[str, list[tuple[int, int]]]  # record kind -> byte ranges in the file
    structure: list[int]  # offsets of b-tree structure bytes


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Written:
    path = tmp_path_factory.mktemp("written") / "chat.db"
    _write(path)
    data = path.read_bytes()
    cells, structure = _cells(path, data)
    with sqlite3.connect(path) as conn:
        [(deltas,)] = conn.execute("SELECT COUNT(*) FROM blobs WHERE codec = 'append'")
        [(writes,)] = conn.execute("SELECT COUNT(*) FROM writes")
    assert deltas >= 3
    assert writes >= 2
    return Written(path, data, _read_all(path), cells, structure)


# -- the file format, as far as placing damage needs it -------------------------------------


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = 0
    for i in range(9):
        byte = data[at + i]
        if i == 8:
            return (value << 8) | byte, at + 9
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value, at + i + 1
    raise AssertionError("unreachable")


def _size(serial: int) -> int:
    sizes = {0: 0, 1: 1, 2: 2, 3: 3, 4: 4, 5: 6, 6: 8, 7: 8, 8: 0, 9: 0}
    return sizes[serial] if serial < 12 else (serial - 12 - serial % 2) // 2


# Which kind of record each column of each table holds (None: decided per row).
_COLUMNS = {
    "checkpoints": ["checkpoint"] * 8 + ["metadata"] + ["checkpoint"] * 6,
    "blobs": [None] * 10,
    "writes": ["writes"] * 11,
    "heads": ["head"] * 4,
}


def _cells(path: Path, data: bytes) -> tuple[dict[str, list[tuple[int, int]]], list[int]]:
    """Byte ranges of each record kind's columns (record headers included), and offsets
    of b-tree structure bytes, in every page of the file."""
    with sqlite3.connect(path) as conn:
        pages = conn.execute("SELECT name, pageno, pagetype FROM dbstat").fetchall()
    page_size = 4096
    cells: dict[str, list[tuple[int, int]]] = {}
    structure: list[int] = []
    for name, pageno, pagetype in pages:
        base = (pageno - 1) * page_size
        head = base + (100 if pageno == 1 else 0)
        kind = data[head]
        header = 12 if kind in (0x02, 0x05) else 8
        count = int.from_bytes(data[head + 3 : head + 5], "big")
        structure.extend(range(head, head + header + 2 * count))
        for i in range(count):
            cell = base + int.from_bytes(
                data[head + header + 2 * i : head + header + 2 * i + 2], "big"
            )
            if kind in (0x0D, 0x0A) and pagetype == "leaf":
                record = _record_start(data, cell, kind, structure)
                if record is not None and name in _COLUMNS:
                    _table_record(data, record, name, cells)
                elif record is not None and name.startswith(("sqlite_autoindex_", "checkpoints_")):
                    end = _record_end(data, record)
                    cells.setdefault("index", []).append((record, end))
    return cells, structure


def _record_start(data: bytes, cell: int, kind: int, structure: list[int]) -> int | None:
    size, at = _varint(data, cell)
    if kind == 0x0D:
        _, at = _varint(data, at)  # the rowid
    structure.extend(range(cell, at))
    return at if size <= 4000 else None  # records spilling to overflow pages: not placed


def _record_end(data: bytes, record: int) -> int:
    header_size, at = _varint(data, record)
    end = record + header_size
    while at < record + header_size:
        serial, at = _varint(data, at)
        end += _size(serial)
    return end


def _table_record(data: bytes, record: int, table: str, cells: dict[str, Any]) -> None:
    header_size, at = _varint(data, record)
    body = record + header_size
    columns = []
    while at < record + header_size:
        serial, at = _varint(data, at)
        columns.append((body, body + _size(serial)))
        body += _size(serial)
    kinds = _COLUMNS[table]
    if table == "blobs":
        codec = data[columns[5][0] : columns[5][1]]
        kinds = ["delta" if codec == b"append" else "value"] * len(columns)
    cells.setdefault(kinds[0], []).append((record, record + header_size))  # its header
    for kind, (start, end) in zip(kinds, columns, strict=False):
        if end > start:
            cells.setdefault(kind, []).append((start, end))


# -- trials ----------------------------------------------------------------------------------


def _outcome(path: Path, truth: dict[str, Any]) -> str:
    """``"exact"`` or ``"detected"``; anything else fails the trial."""
    try:
        found = _read_all(path)
    except StatekeeperError:
        return "detected"
    assert found == truth, f"a read of {path} returned a value that is not what was stored"
    return "exact"


def _verified(path: Path) -> list[Any]:
    try:
        with SqliteCheckpointer(str(path)) as saver:
            return saver.verify()
    except StorageError as exc:  # the file cannot even be opened: that is a finding too
        return [exc]


def _trial(
    written: Written, tmp_path: Path, name: str, damage: Callable[[bytearray], bytes]
) -> tuple[str, list[Any]]:
    path = tmp_path / f"{name}.db"
    path.write_bytes(damage(bytearray(written.data)))
    outcome = _outcome(path, written.truth)
    return outcome, _verified(path)


def _flip(offset: int, bit: int) -> Callable[[bytearray], bytes]:
    def damage(data: bytearray) -> bytes:
        data[offset] ^= 1 << bit
        return bytes(data)

    return damage


def _offsets(ranges: list[tuple[int, int]], rng: random.Random, n: int) -> Iterator[int]:
    weights = [end - start for start, end in ranges]
    for start, end in rng.choices(ranges, weights=weights, k=n):
        yield rng.randrange(start, end)


@pytest.mark.parametrize(
    "kind", ["checkpoint", "metadata", "writes", "value", "delta", "head", "index"]
)
def test_bit_flips_in_every_record_kind_are_detected(
    written: Written, tmp_path: Path, kind: str
) -> None:
    """Flips inside a record's bytes: every read is exact or raises, and verify() always
    reports the damage (a flip in a key that reads take from an index reads as exact:
    the table row is not what they use, and verify() finds it)."""
    rng = random.Random(f"{SEED}-{kind}")
    for offset in _offsets(written.cells[kind], rng, 30):
        bit = rng.randrange(8)
        outcome, damage = _trial(written, tmp_path, f"{kind}-{offset}-{bit}", _flip(offset, bit))
        assert damage, f"verify() missed a flip of bit {bit} at byte {offset} ({kind}): {tmp_path}"
        assert outcome in ("exact", "detected")


def test_bit_flips_in_btree_structure_are_never_silent(written: Written, tmp_path: Path) -> None:
    """Flips in page headers, cell pointers and cell headers (sizes, rowids): every read
    is exact or raises a StatekeeperError, and what a read detects, verify() reports."""
    rng = random.Random(f"{SEED}-structure")
    for _ in range(40):
        offset, bit = rng.choice(written.structure), rng.randrange(8)
        outcome, damage = _trial(written, tmp_path, f"s-{offset}-{bit}", _flip(offset, bit))
        assert outcome == "exact" or damage, f"bit {bit} at byte {offset}: verify() saw nothing"


def test_truncations_at_any_byte_and_page_boundary_are_detected(
    written: Written, tmp_path: Path
) -> None:
    rng = random.Random(f"{SEED}-truncate")
    pages = len(written.data) // 4096
    cuts = [rng.randrange(1, len(written.data)) for _ in range(10)]
    cuts += [4096 * rng.randrange(1, pages) for _ in range(6)]
    for cut in cuts:
        outcome, damage = _trial(written, tmp_path, f"cut-{cut}", lambda d, cut=cut: bytes(d[:cut]))
        assert outcome == "detected", f"a cut at byte {cut} read back as {outcome}"
        assert damage, f"verify() missed a cut at byte {cut}"


_ROWS = {
    "checkpoints": "checkpoint_id",
    "blobs": "version",
    "writes": "idx",
    "heads": "newest_id",
}


@pytest.mark.parametrize("table", list(_ROWS))
def test_deleted_rows_are_detected(written: Written, tmp_path: Path, table: str) -> None:
    rng = random.Random(f"{SEED}-{table}")
    with sqlite3.connect(written.path) as conn:
        rowids = [rowid for (rowid,) in conn.execute(f"SELECT rowid FROM {table}")]
    for rowid in rng.sample(rowids, min(4, len(rowids))):
        path = tmp_path / f"{table}-{rowid}.db"
        path.write_bytes(written.data)
        with sqlite3.connect(path) as conn:
            conn.execute(f"DELETE FROM {table} WHERE rowid = ?", (rowid,))
        assert _outcome(path, written.truth) == "detected", f"{table} row {rowid} deleted"
        assert _verified(path), f"verify() missed {table} row {rowid} deleted"


def test_an_intact_database_verifies_clean(written: Written) -> None:
    assert _verified(written.path) == []


# -- what is named, and what fallback returns -------------------------------------------------


def _copy(written: Written, tmp_path: Path, sql: str = "", params: tuple[Any, ...] = ()) -> Path:
    path = tmp_path / "damaged.db"
    path.write_bytes(written.data)
    if sql:
        with sqlite3.connect(path) as conn:
            conn.execute(sql, params)
    return path


def _newest(path: Path, thread_id: str = "chat-0", nth: int = 0) -> str:
    with sqlite3.connect(path) as conn:
        rows = conn.execute(
            "SELECT checkpoint_id FROM checkpoints WHERE thread_id = ? ORDER BY checkpoint_id DESC",
            (thread_id,),
        ).fetchall()
    return str(rows[nth][0])


# Each alters one stored record the way damage would, without fixing its checksum; ?1 is
# the newest checkpoint id of chat-0, and the reads of chat-0 must name what is damaged.
NAMED = {
    "checkpoint": (
        "UPDATE checkpoints SET checkpoint = CAST(checkpoint || X'00' AS BLOB)"
        " WHERE checkpoint_id = ?1",
        "checkpoint",
        "checkpoints:",
    ),
    "parent id": (
        "UPDATE checkpoints SET parent_checkpoint_id = NULL WHERE checkpoint_id = ?1",
        "checkpoint",
        "checkpoints:",
    ),
    "metadata": (
        "UPDATE checkpoints SET metadata = replace(metadata, '\"step\"', '\"stop\"')"
        " WHERE checkpoint_id = ?1",
        "metadata",
        "checkpoints:",
    ),
    "channel versions": (
        "UPDATE checkpoints SET channel_versions = '{}' WHERE checkpoint_id = ?1",
        "checkpoint",
        "checkpoints:",
    ),
    "pending write": (
        "UPDATE writes SET value = CAST(value || X'00' AS BLOB) WHERE checkpoint_id = ?1",
        "writes",
        "writes:",
    ),
    "lost pending write": (
        "DELETE FROM writes WHERE rowid = (SELECT MAX(rowid) FROM writes WHERE checkpoint_id = ?1)",
        "writes",
        "writes:",
    ),
    "value": (
        "UPDATE blobs SET blob = X'a57261696e79' WHERE channel = 'topic' AND ?1 IS NOT NULL",
        "value",
        "blobs:",
    ),
    "lost value": (
        "DELETE FROM blobs WHERE channel = 'topic' AND ?1 IS NOT NULL",
        "value",
        "blobs:",
    ),
    "delta": (
        "UPDATE blobs SET blob = CAST(substr(blob, 1, length(blob) - 1) || X'21' AS BLOB)"
        " WHERE codec = 'append' AND thread_id = 'chat-0' AND ?1 IS NOT NULL",
        "delta",
        "blobs:",
    ),
    "lost checkpoint": ("DELETE FROM checkpoints WHERE checkpoint_id = ?1", "checkpoint", "heads:"),
    "head": (
        "UPDATE heads SET newest_id = substr(newest_id, 1, 8)"
        " WHERE thread_id = 'chat-0' AND ?1 > ''",
        "head",
        "heads:",
    ),
}


@pytest.mark.parametrize("what", list(NAMED))
def test_damage_is_named_by_the_read_and_by_verify(
    written: Written, tmp_path: Path, what: str
) -> None:
    sql, record, table = NAMED[what]
    newest = _newest(written.path)
    path = _copy(written, tmp_path, sql, (newest,))
    with SqliteCheckpointer(str(path)) as saver:
        with pytest.raises(CorruptCheckpointError, match=r"is damaged: .*run verify") as caught:
            saver.get_tuple(_config("chat-0"))
        found = saver.verify()
    damage = caught.value.damage
    assert (damage.backend, damage.thread_id, damage.checkpoint_ns) == ("sqlite", "chat-0", "")
    assert (damage.record, damage.path.split("[")[0]) == (record, table)
    assert any((d.record, d.path.split("[")[0]) == (record, table) for d in found), found


def test_a_damaged_thread_raises_from_the_graph_too(written: Written, tmp_path: Path) -> None:
    """LangGraph's own reads (get_state, invoke(None)) get CorruptCheckpointError, never
    a KeyError from a checkpoint that decoded to something else."""
    import ormsgpack

    stripped = ormsgpack.packb({"v": 4, "id": _newest(written.path), "ts": "x"})  # no versions_seen
    path = _copy(
        written,
        tmp_path,
        "UPDATE checkpoints SET checkpoint = ?2, codec = '' WHERE checkpoint_id = ?1",
        (_newest(written.path), stripped),
    )
    with SqliteCheckpointer(str(path)) as saver:
        graph = _graph(saver)
        with pytest.raises(CorruptCheckpointError, match="chat-0"):
            graph.get_state(_config("chat-0"))
        with pytest.raises(CorruptCheckpointError, match="chat-0"):
            graph.invoke(Command(resume="yes"), _config("chat-0"))
        with pytest.raises(CorruptCheckpointError, match="chat-0"):
            graph.invoke(None, _config("chat-0"))
        assert graph.get_state(_config("chat-1")).values == written.truth["chat-1"][3][0]


def test_fallback_serves_the_newest_intact_checkpoint_and_says_so(
    written: Written, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    damaged = _newest(written.path)
    path = _copy(
        written,
        tmp_path,
        "UPDATE checkpoints SET checkpoint = CAST(checkpoint || X'00' AS BLOB)"
        " WHERE checkpoint_id = ?1",
        (damaged,),
    )
    history = written.truth["chat-0"][1]
    with SqliteCheckpointer(str(path), on_corrupt="fallback") as saver:
        latest = saver.get_tuple(_config("chat-0"))
        assert latest is not None
        assert (latest.checkpoint, latest.metadata) == history[1][:2]  # the parent, exactly
        assert damaged in caplog.text
        assert "skipped damaged data" in caplog.text
        listed = [(t.checkpoint, t.metadata) for t in saver.list(_config("chat-0"))]
        assert listed == [entry[:2] for entry in history[1:]]
        with pytest.raises(CorruptCheckpointError):  # asked for by id: never substituted
            saver.get_tuple({"configurable": {"thread_id": "chat-0", "checkpoint_id": damaged}})
        state = _graph(saver).get_state(_config("chat-0"))
        assert state.config["configurable"]["checkpoint_id"] == history[1][0]["id"]


def test_fallback_never_returns_a_wrong_value(written: Written, tmp_path: Path) -> None:
    """Under random damage, whatever a fallback read returns is a stored checkpoint,
    exactly as stored; it raises only for damage SQLite reports itself (no row of that
    page can be read, so there is nothing to skip to)."""
    stored = {entry[0]["id"]: entry for t in THREADS for entry in written.truth[t][1]}
    rng = random.Random(f"{SEED}-fallback")
    ranges = [
        r
        for kind in ("checkpoint", "metadata", "writes", "value", "delta")
        for r in written.cells[kind]
    ]
    raised: list[CorruptCheckpointError] = []
    for offset in _offsets(ranges, rng, 20):
        path = tmp_path / f"fallback-{offset}.db"
        path.write_bytes(_flip(offset, rng.randrange(8))(bytearray(written.data)))
        try:
            with SqliteCheckpointer(str(path), on_corrupt="fallback") as saver:
                for thread_id in THREADS:
                    config = _config(thread_id)
                    for t in filter(None, [saver.get_tuple(config), *saver.list(config)]):
                        entry = (t.checkpoint, t.metadata, t.pending_writes, t.parent_config)
                        assert entry == stored[t.checkpoint["id"]], f"read from {path}"
        except CorruptCheckpointError as exc:
            raised.append(exc)
    assert [e for e in raised if e.damage.record is not None] == []  # SQLite's own only


def test_damage_sqlite_finds_itself_is_wrapped_and_names_the_file(
    written: Written, tmp_path: Path
) -> None:
    with sqlite3.connect(written.path) as conn:
        [(page,)] = conn.execute(
            "SELECT pageno FROM dbstat WHERE name = 'checkpoints' AND pagetype = 'leaf' LIMIT 1"
        )
    data = bytearray(written.data)
    data[(page - 1) * 4096 : page * 4096] = bytes(range(256)) * 16  # a page of garbage
    path = tmp_path / "garbage.db"
    path.write_bytes(bytes(data))
    with SqliteCheckpointer(str(path)) as saver:
        with pytest.raises(StorageError, match=re.escape(str(path))):
            _read_all(path)
        assert saver.verify()
    path.write_bytes(written.data[:150])  # the header survives, the rest is lost
    with pytest.raises(StorageError, match=re.escape(str(path))):
        _read_all(path)
