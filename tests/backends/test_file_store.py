"""The file memory store beyond the shared suite: its layout on disk, what it does with
damaged files, and a put killed at any instant (a real child process, SIGKILLed)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from statekeeper.errors import ConfigurationError, SchemaVersionError, StorageError
from statekeeper.memory.store import FileStore, open_store

NS = ("users", "Ana")


def test_one_readable_file_per_item_under_a_folder_per_label(tmp_path: Path) -> None:
    with open_store(f"file://{tmp_path}/m") as store:
        assert isinstance(store, FileStore)
        store.put(NS, "k/1", {"text": "héllo"})
    path = tmp_path / "m" / "namespaces" / "users" / "^ana" / "k~2f1.json"
    header, meta, value, end = path.read_bytes().split(b"\n")
    assert header.startswith(b"statekeeper-record 1 ")
    assert json.loads(meta)["namespace"] == ["users", "Ana"]
    assert json.loads(meta)["key"] == "k/1"
    assert json.loads(value) == {"text": "héllo"}
    assert end == b""
    marker = json.loads((tmp_path / "m" / "statekeeper-memory.json").read_text())
    assert marker == {"format": "statekeeper-memory-files", "version": 1}


def test_relative_urls_and_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with open_store("file://./rel/m?fsync=false&lock_timeout=2") as store:
        assert isinstance(store, FileStore)
        assert (store.fsync, store.root) == (False, Path("rel/m"))
        store.put(NS, "k", {"v": 1})
    assert (tmp_path / "rel" / "m" / "namespaces").is_dir()
    for bad in ("file://host/x", "file://", "file:///x?colour=red"):
        with pytest.raises(ConfigurationError):
            open_store(bad)


def test_long_labels_and_keys_get_hashed_names_and_still_round_trip(tmp_path: Path) -> None:
    label, key = "L" * 300, "k" * 400
    with open_store(f"file://{tmp_path}/m") as store:
        store.put((label, "x"), key, {"text": "long names"})
        store.put((label, "x"), key + "!", {"text": "another"})
        assert store.get((label, "x"), key).value == {"text": "long names"}  # type: ignore[union-attr]
        assert {i.key for i in store.search((label,), query="long names")} == {key}
        assert store.list_namespaces() == [(label, "x")]
    assert all(len(p.name) <= 130 for p in (tmp_path / "m").rglob("*"))


def test_a_directory_that_is_not_a_store_is_refused(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ConfigurationError, match="not empty"):
        open_store(f"file://{tmp_path}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_a_newer_format_is_refused(tmp_path: Path) -> None:
    with open_store(f"file://{tmp_path}/m"):
        pass
    marker = tmp_path / "m" / "statekeeper-memory.json"
    marker.write_text(json.dumps({"format": "statekeeper-memory-files", "version": 2}))
    with pytest.raises(SchemaVersionError, match="version 2"):
        open_store(f"file://{tmp_path}/m")


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty"])
def test_a_damaged_item_is_named_and_kept(tmp_path: Path, damage: str) -> None:
    with open_store(f"file://{tmp_path}/m") as store:
        store.put(NS, "k", {"text": "dark mode everywhere"})
        store.put(NS, "other", {"text": "light"})
        (path,) = (tmp_path / "m").rglob("k.json")
        data = path.read_bytes()
        if damage == "flip":
            data = data.replace(b"dark", b"dork")
        path.write_bytes(data[:-10] if damage == "truncate" else b"" if damage == "empty" else data)
        for read in (
            lambda: store.get(NS, "k"),
            lambda: store.search(NS, query="dark"),
            lambda: store.list_namespaces(),
        ):
            with pytest.raises(StorageError, match=re.escape(str(path))):
                read()
        with pytest.raises(StorageError, match="damaged"):
            store.put(NS, "k", {"text": "overwrite"})
        assert store.get(NS, "other").value == {"text": "light"}  # type: ignore[union-attr]
    assert path.read_bytes() == (
        data[:-10] if damage == "truncate" else b"" if damage == "empty" else data
    )


def test_a_misplaced_item_file_is_refused(tmp_path: Path) -> None:
    with open_store(f"file://{tmp_path}/m") as store:
        store.put(NS, "a", {"v": 1})
        (path,) = (tmp_path / "m").rglob("a.json")
        path.rename(path.with_name("b.json"))
        with pytest.raises(StorageError, match="belongs elsewhere"):
            store.get(NS, "b")


def test_temporary_files_and_stray_names_are_ignored(tmp_path: Path) -> None:
    with open_store(f"file://{tmp_path}/m") as store:
        store.put(NS, "a", {"text": "kept"})
        folder = next((tmp_path / "m").rglob("a.json")).parent
        (folder / ".tmp-123-abc").write_bytes(b"half a wri")  # a killed writer's leftover
        (folder / ".DS_Store").write_bytes(b"\0")
        assert [i.key for i in store.search(NS)] == ["a"]
        store.delete(NS, "a")
        assert store.search(NS) == []
        assert store.list_namespaces() == []


def test_deleting_the_last_item_removes_the_namespace_folder(tmp_path: Path) -> None:
    with open_store(f"file://{tmp_path}/m") as store:
        store.put(("a", "b"), "k", {"v": 1})
        store.put(("a",), "k", {"v": 1})
        store.delete(("a", "b"), "k")
        assert not (tmp_path / "m" / "namespaces" / "a" / "b").exists()
        store.delete(("a",), "k")
        store.put(("a", "c"), "k", {"v": 2})  # the parent folder is made again
        assert store.list_namespaces() == [("a", "c")]


_WRITER = """
import sys
from statekeeper.memory.store import FileStore

store = FileStore(sys.argv[1])
big = "x" * 400_000
i = 0
while True:
    store.put(("crash",), "k", {"n": i, "text": big})
    store.put(("crash",), f"k{i % 5}", {"n": i})
    if i == 0:
        print("ready", flush=True)
    i += 1
"""


def test_a_put_killed_at_any_instant_leaves_the_old_item_or_the_new(tmp_path: Path) -> None:
    root = tmp_path / "m"
    for round_ in range(2):
        child = subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(root)], stdout=subprocess.PIPE, text=True
        )
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        time.sleep(0.05 + 0.1 * round_)
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
        child.stdout.close()
        with open_store(f"file://{root}") as store:
            item = store.get(("crash",), "k")
            assert item is not None
            assert item.value["text"] == "x" * 400_000
            listed = store.search(("crash",), limit=100)
            assert {i.key for i in listed} <= {"k", "k0", "k1", "k2", "k3", "k4"}
            store.put(("crash",), "k", {"n": -1, "text": "after"})  # its lock is free
