"""SQLite read-only: ``mode="ro"`` (``?mode=ro``), and storage that is not writable.

Reads work, every write raises ``ReadOnlyError`` before anything is touched, and nothing
is created: no database, no directory, no claims folder. On a read-only bind mount
(``unshare -rm`` + ``mount --bind -o ro``, run in a child process) not one file appears,
the CLI's inspection commands work, and a database left with its write-ahead log is read
with the log's transactions.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)

from statekeeper._storage.payload import encode, safe_serde
from statekeeper.backends.sqlite._database import Database
from statekeeper.backends.sqlite.checkpointer import MIGRATIONS, SqliteCheckpointer
from statekeeper.backends.sqlite.store import SqliteStore
from statekeeper.checkpointers import open_checkpointer
from statekeeper.errors import ConfigurationError, ReadOnlyError, StorageNotFoundError
from statekeeper.memory.store import open_store


def _put(saver: SqliteCheckpointer, thread: str, values: dict[str, Any]) -> Any:
    checkpoint = generate_checkpoint(channel_values=values)
    versions = {channel: saver.get_next_version(None, None) for channel in values}
    checkpoint["channel_versions"] = versions
    return saver.put(generate_config(thread), checkpoint, generate_metadata(), versions)


def _tree(root: Path) -> dict[str, int]:
    """Every file and folder under ``root`` with its size: what "nothing was created or
    changed" is compared on."""
    return {
        str(p.relative_to(root)): (p.stat().st_size if p.is_file() else -1)
        for p in sorted(root.rglob("*"))
    }


def _stored(path: Path) -> Any:
    """A database with two threads, one with pending writes, and memory items."""
    with SqliteCheckpointer(str(path)) as saver:
        first = _put(saver, "t1", {"log": ["a", "b"], "topic": "x"})
        saver.put_writes(first, [("log", ["c"])], "task-1")
        _put(saver, "t2", {"n": 1})
    with SqliteStore(str(path)) as store:
        store.put(("notes",), "k", {"text": "the launch code is ready"})
    return first


WRITES = {
    "put": lambda s, cfg: _put(s, "t1", {"a": 1}),
    "put_writes": lambda s, cfg: s.put_writes(cfg, [("a", 1)], "task-2"),
    "delete_thread": lambda s, cfg: s.delete_thread("t1"),
    "delete_for_runs": lambda s, cfg: s.delete_for_runs(["run"]),
    "copy_thread": lambda s, cfg: s.copy_thread("t1", "t9"),
    "prune": lambda s, cfg: s.prune(["t1"]),
    "claim_thread": lambda s, cfg: s.claim_thread("t1").__enter__(),
    "verify(repair=True)": lambda s, cfg: s.verify(repair=True),
}


def test_read_only_reads_everything_and_refuses_every_write(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    first = _stored(path)
    before = _tree(tmp_path)
    with open_checkpointer(f"sqlite:///{path}?mode=ro") as saver:
        assert saver.read_only
        loaded = saver.get_tuple(first)
        assert loaded is not None
        assert loaded.checkpoint["channel_values"] == {"log": ["a", "b"], "topic": "x"}
        assert [w.value for w in saver.get_writes(first)] == [["c"]]
        assert sorted(t.config["configurable"]["thread_id"] for t in saver.list(None)) == [
            "t1",
            "t2",
        ]
        assert saver.verify() == []
        for name, write in WRITES.items():
            with pytest.raises(ReadOnlyError, match="read-only"):
                write(saver, first)
            assert saver.get_tuple(first) is not None, name
    with SqliteStore(str(path), mode="ro") as store:
        assert store.read_only
        assert store.get(("notes",), "k").value == {"text": "the launch code is ready"}
        assert [i.key for i in store.search(("notes",), query="launch code")] == ["k"]
        assert store.list_namespaces() == [("notes",)]
        with pytest.raises(ReadOnlyError, match="read-only"):
            store.put(("notes",), "k2", {"text": "no"})
        with pytest.raises(ReadOnlyError, match="read-only"):
            store.delete(("notes",), "k")
        with pytest.raises(ReadOnlyError, match="read-only"):
            store.sweep_ttl()
    after = _tree(tmp_path)
    # SQLite's own -wal/-shm, which a reader of a WAL database in a writable folder
    # creates to share it safely with writers, may appear; nothing else does.
    assert {k: v for k, v in after.items() if not k.endswith(("-wal", "-shm"))} == before


def test_a_missing_database_opened_read_only_is_not_found_and_not_created(
    tmp_path: Path,
) -> None:
    for url in (f"sqlite:///{tmp_path}/none.db?mode=ro", f"sqlite:///{tmp_path}/a/b/none.db"):
        with pytest.raises(StorageNotFoundError, match=r"no database at .*nothing was created"):
            open_checkpointer(url, mode="ro")
    with pytest.raises(StorageNotFoundError, match="no database at"):
        open_store(f"sqlite:///{tmp_path}/none.db?mode=ro")
    assert _tree(tmp_path) == {}


def test_mode_and_on_corrupt_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="mode must be one of rw, ro, got 'readonly'"):
        open_checkpointer(f"sqlite:///{tmp_path}/s.db?mode=readonly")
    with pytest.raises(ConfigurationError, match="on_corrupt must be one of raise, fallback"):
        open_checkpointer(f"sqlite:///{tmp_path}/s.db?on_corrupt=ignore")
    assert _tree(tmp_path) == {}


def test_memory_opened_read_only_is_an_empty_store_that_refuses_writes() -> None:
    with open_checkpointer("memory://?mode=ro") as saver:
        assert saver.read_only
        assert saver.get_tuple(generate_config("t")) is None
        assert list(saver.list(None)) == []
        with pytest.raises(ReadOnlyError):
            _put(saver, "t", {"a": 1})


def test_an_older_schema_is_read_without_being_migrated(tmp_path: Path) -> None:
    """A database at schema version 3 opened read-only: read through temporary views
    (its rows have no checksums: read unverified, and verify() says so), its bytes left
    as they were."""
    path = tmp_path / "old.db"
    Database(path, component="checkpoints", migrations=MIGRATIONS[:3]).close()
    serde = safe_serde()
    version = json.dumps("00000000000000000000000000000001.5")
    checkpoint = generate_checkpoint(checkpoint_id="1ef00000-0000-6000-8000-000000000001")
    checkpoint["channel_versions"] = {"log": json.loads(version)}
    stripped = {k: v for k, v in checkpoint.items() if k != "channel_values"}
    with sqlite3.connect(path) as conn:
        conn.execute(
            "INSERT INTO blobs VALUES ('t', '', 'log', ?, ?, ?, ?, NULL, NULL)",
            (version, *encode(serde, ["old"], compress=False)),
        )
        conn.execute(
            "INSERT INTO checkpoints VALUES ('t', '', ?, NULL, NULL, ?, ?, ?, '{}', ?)",
            (
                checkpoint["id"],
                *encode(serde, stripped, compress=False),
                json.dumps({"log": version}),
            ),
        )
        conn.execute("PRAGMA journal_mode = DELETE")  # no -wal: the file is the whole state
    before = path.read_bytes()
    with SqliteCheckpointer(str(path), mode="ro") as saver:
        loaded = saver.get_tuple(generate_config("t"))
        assert loaded is not None
        assert loaded.checkpoint["channel_values"] == {"log": ["old"]}
        assert [t.checkpoint["id"] for t in saver.list(None)] == [checkpoint["id"]]
        assert {(d.record, "unverified" in d.reason) for d in saver.verify()} == {
            ("checkpoint", True),
            ("value", True),
        }
    with SqliteStore(str(path), mode="ro") as store:  # no memory tables at all: empty
        assert store.list_namespaces() == []
    assert path.read_bytes() == before


# -- a read-only bind mount ---------------------------------------------------------------------


def _can_mount(directory: Path) -> str | None:
    """Why a read-only bind mount cannot be made here (None: it can)."""
    if sys.platform != "linux" or shutil.which("unshare") is None:
        return "needs Linux with unshare"
    probe = subprocess.run(
        ["unshare", "-rm", "sh", "-c", f'mount --bind -o ro "{directory}" "{directory}"'],
        capture_output=True,
        check=False,
    )
    if probe.returncode != 0:
        return f"unshare -rm cannot mount here: {probe.stderr.decode(errors='replace').strip()}"
    return None


@pytest.fixture(scope="module")
def read_only_mount(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Run a Python script in a child process that sees ``directory`` mounted read-only."""
    reason = _can_mount(tmp_path_factory.mktemp("probe"))
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"read-only mount tests must run under CI: {reason}")
        pytest.skip(reason)

    def run(directory: Path, script: str) -> dict[str, Any]:
        command = (
            f'mount --bind -o ro "{directory}" "{directory}" && exec "{sys.executable}" -c "$0"'
        )
        done = subprocess.run(
            ["unshare", "-rm", "sh", "-c", command, textwrap.dedent(script)],
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "SK_DIR": str(directory)},
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.splitlines()[-1])

    return run


MOUNTED_READS = """
import json, os, subprocess, sys
from statekeeper.backends.sqlite.checkpointer import SqliteCheckpointer
from statekeeper.backends.sqlite.store import SqliteStore
from statekeeper.errors import ReadOnlyError
path = os.path.join(os.environ["SK_DIR"], "state.db")
found = {}
for mode in ("ro", "rw"):  # rw: opened read-only anyway, the storage is not writable
    with SqliteCheckpointer(path, mode=mode) as saver:
        config = {"configurable": {"thread_id": "t1"}}
        tup = saver.get_tuple(config)
        found[mode] = {
            "read_only": saver.read_only,
            "values": tup.checkpoint["channel_values"],
            "writes": [w.value for w in saver.get_writes(tup.config)],
            "threads": sorted(t.config["configurable"]["thread_id"] for t in saver.list(None)),
            "verify": saver.verify(),
        }
        refused = []
        for name, write in (
            ("delete_thread", lambda: saver.delete_thread("t1")),
            ("claim_thread", lambda: saver.claim_thread("t1").__enter__()),
            ("put_writes", lambda: saver.put_writes(tup.config, [("a", 1)], "x")),
        ):
            try:
                write()
            except ReadOnlyError:
                refused.append(name)
        found[mode]["refused"] = refused
with SqliteStore(path) as store:
    found["store"] = [store.read_only, store.get(("notes",), "k").value]
    try:
        store.put(("notes",), "k", {"text": "no"})
    except ReadOnlyError:
        found["store"].append("refused")
url = "sqlite:///" + path + "?mode=ro"
cli = {}
commands = [["threads"], ["history", "t1"], ["show", "t1"], ["diff", "t1"], ["export"], ["verify"]]
for args in commands:
    done = subprocess.run(
        [sys.executable, "-m", "statekeeper", "--db", url, *args], capture_output=True, text=True
    )
    cli[args[0]] = [done.returncode, done.stderr.strip()[-300:]]
found["cli"] = cli
print(json.dumps(found))
"""


def test_a_read_only_mount_is_read_and_nothing_is_created(
    read_only_mount: Any, tmp_path: Path
) -> None:
    directory = tmp_path / "mounted"
    directory.mkdir()
    _stored(directory / "state.db")
    before = _tree(directory)
    assert not any(name.endswith(("-wal", "-shm")) for name in before)  # closed cleanly
    found = read_only_mount(directory, MOUNTED_READS)
    for mode in ("ro", "rw"):
        assert found[mode] == {
            "read_only": True,
            "values": {"log": ["a", "b"], "topic": "x"},
            "writes": [["c"]],
            "threads": ["t1", "t2"],
            "verify": [],
            "refused": ["delete_thread", "claim_thread", "put_writes"],
        }
    assert found["store"] == [True, {"text": "the launch code is ready"}, "refused"]
    assert found["cli"] == {
        name: [0, found["cli"][name][1]]
        for name in ("threads", "history", "show", "diff", "export", "verify")
    }, found["cli"]
    assert _tree(directory) == before  # not one file created or changed


WAL_READS = """
import json, os
from statekeeper.backends.sqlite.checkpointer import SqliteCheckpointer
from statekeeper.errors import StorageError
path = os.path.join(os.environ["SK_DIR"], "state.db")
try:
    with SqliteCheckpointer(path, mode="ro") as saver:
        found = sorted(t.config["configurable"]["thread_id"] for t in saver.list(None))
except StorageError as exc:
    found = str(exc)
print(json.dumps(found))
"""

_LEAVE_WAL = """
import os, sys
from statekeeper.backends.sqlite.checkpointer import SqliteCheckpointer
from langgraph.checkpoint.conformance import test_utils as u
saver = SqliteCheckpointer(sys.argv[1])
checkpoint = u.generate_checkpoint(channel_values={"a": 1})
versions = checkpoint["channel_versions"] = {"a": saver.get_next_version(None)}
saver.put(u.generate_config("in-the-wal"), checkpoint, u.generate_metadata(), versions)
os._exit(0)  # killed: the -wal holds the checkpoint, the -shm stays
"""


def test_a_write_ahead_log_on_a_read_only_mount_is_read_or_refused_clearly(
    read_only_mount: Any, tmp_path: Path
) -> None:
    directory = tmp_path / "mounted"
    directory.mkdir()
    path = directory / "state.db"
    _stored(path)
    subprocess.run([sys.executable, "-c", _LEAVE_WAL, str(path)], check=True)
    assert {"state.db-wal", "state.db-shm"} <= set(_tree(directory))
    before = _tree(directory)
    assert read_only_mount(directory, WAL_READS) == ["in-the-wal", "t1", "t2"]
    assert _tree(directory) == before
    (directory / "state.db-shm").unlink()  # a log without its index: SQLite cannot read it
    before = _tree(directory)
    refused = read_only_mount(directory, WAL_READS)
    assert "its write-ahead log (-wal) holds transactions but its -shm file is missing" in refused
    assert _tree(directory) == before
