"""Read-only file storage (docs/file-backend.md, "Read-only"): ``mode="ro"`` (``?mode=ro``),
and any directory that is not writable, such as a read-only mount. Reads work; nothing is
created or changed — no directory, file or lock file — and every write raises
``ReadOnlyError`` before it touches anything.

The read-only mount is a real one: ``unshare -rm`` and ``mount --bind -o ro`` in a child
process (skipped, saying why, where that is not available; never under CI=true).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from statekeeper.checkpointers import FileCheckpointer, open_checkpointer
from statekeeper.errors import ReadOnlyError, StorageNotFoundError
from statekeeper.memory.store import open_store
from tests.backends.test_file import put_step
from tests.checkpointers.test_contract import cfg, cp_id


def tree(root: Path) -> dict[str, Any]:
    """Every directory and file under ``root`` (lock files too): each file's size,
    modification time and SHA-256."""
    found: dict[str, Any] = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs:
            found[str(Path(folder, name).relative_to(root))] = "dir"
        for name in files:
            path = Path(folder, name)
            stat = path.stat()
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            found[str(path.relative_to(root))] = (stat.st_size, stat.st_mtime_ns, digest)
    return found


def fill(root: Path) -> dict[str, Any]:
    """Two threads (one with a subgraph namespace), values inline and in files, writes;
    then no lock file (as a directory copied from elsewhere has none). Returns what a
    reader sees."""
    with FileCheckpointer(root) as saver:
        for thread, ns in (("t", ""), ("t", "child:1"), ("u", "")):
            versions: dict[str, str] = {}
            parent = cfg(thread, ns)
            for step in range(1, 5):
                parent = put_step(saver, parent, versions, step, history=True)
        seen = {
            "all": [t.config for t in saver.list(None)],
            "latest": saver.get_tuple(cfg("t")),
            "writes": saver.get_writes(saver.list(cfg("t"), limit=1).__next__().config),
        }
    for lock in (root / "locks").iterdir():
        lock.unlink()
    return seen


def check_reads(saver: FileCheckpointer, seen: dict[str, Any]) -> None:
    assert [t.config for t in saver.list(None)] == seen["all"]
    latest = saver.get_tuple(cfg("t"))
    assert latest == seen["latest"]
    assert latest is not None
    assert saver.get_writes(latest.config) == seen["writes"]
    history = saver.get_delta_channel_history(config=latest.config, channels=["history"])
    assert set(history) == {"history"}
    assert saver.verify() == []


def check_writes_refused(saver: FileCheckpointer) -> None:
    latest = saver.get_tuple(cfg("t"))
    assert latest is not None
    refused = [
        lambda: put_step(saver, latest.config, {}, 9),
        lambda: saver.put_writes(latest.config, [("log", "x")], "task"),
        lambda: saver.delete_thread("t"),
        lambda: saver.delete_for_runs(["run"]),
        lambda: saver.copy_thread("t", "copy"),
        lambda: saver.prune(["t"]),
        lambda: saver.claim_thread("t").__enter__(),
        lambda: saver.verify(repair=True),
        lambda: saver.verify(quarantine=True),
        lambda: asyncio.run(saver.adelete_thread("t")),
    ]
    for write in refused:
        with pytest.raises(ReadOnlyError, match="read-only"):
            write()


def test_mode_ro_reads_and_creates_or_changes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "store"
    seen = fill(root)
    before = tree(root)
    with open_checkpointer(f"file://{root}?mode=ro") as saver:
        assert saver.read_only
        check_reads(saver, seen)
        check_writes_refused(saver)
    assert tree(root) == before  # no file, folder or lock file created or changed


def test_a_missing_or_empty_directory_opened_read_only_is_not_found_and_not_created(
    tmp_path: Path,
) -> None:
    for url in (f"file://{tmp_path}/missing/store?mode=ro", f"file://{tmp_path}?mode=ro"):
        with pytest.raises(StorageNotFoundError, match="opened read-only, so none was created"):
            open_checkpointer(url)
        with pytest.raises(StorageNotFoundError, match="opened read-only, so none was created"):
            open_store(url)
    assert list(tmp_path.iterdir()) == []


def test_a_directory_that_is_not_writable_opens_read_only(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root writes anywhere: the read-only mount test covers this as root")
    root = tmp_path / "store"
    seen = fill(root)
    for folder, dirs, _ in os.walk(root):
        for name in [".", *dirs]:
            Path(folder, name).chmod(0o555)
    try:
        with FileCheckpointer(root) as saver:
            assert saver.read_only
            check_reads(saver, seen)
    finally:
        for folder, dirs, _ in os.walk(root):
            for name in [".", *dirs]:
                Path(folder, name).chmod(0o755)


def test_the_memory_store_read_only_reads_and_creates_nothing(tmp_path: Path) -> None:
    root = tmp_path / "memory"
    with open_store(f"file://{root}") as store:
        store.put(("notes", "alice"), "k1", {"text": "likes tea"}, ttl=60)
        store.put(("notes", "bob"), "k2", {"text": "likes coffee"})
    for lock in (root / "locks").iterdir():
        lock.unlink()
    before = tree(root)
    with open_store(f"file://{root}?mode=ro") as store:
        assert store.read_only
        item = store.get(("notes", "alice"), "k1", refresh_ttl=True)  # no clock restarted
        assert item is not None
        assert item.value == {"text": "likes tea"}
        assert [i.key for i in store.search(("notes",), query="coffee")][:1] == ["k2"]
        assert sorted(store.list_namespaces()) == [("notes", "alice"), ("notes", "bob")]
        for write in (
            lambda: store.put(("notes", "alice"), "k3", {"text": "x"}),
            lambda: store.delete(("notes", "bob"), "k2"),
            store.sweep_ttl,
        ):
            with pytest.raises(ReadOnlyError, match="read-only"):
                write()
    assert tree(root) == before


# -- a read-only mount ---------------------------------------------------------------------


def _unshare_available() -> str | None:
    """Why a read-only bind mount cannot be made here, or None if it can."""
    if shutil.which("unshare") is None:
        return "no unshare command"
    probe = subprocess.run(
        ["unshare", "-rm", "sh", "-c", "mount --bind -o ro / /mnt 2>/dev/null || true; true"],
        capture_output=True,
        check=False,
    )
    if probe.returncode != 0:
        return f"unshare -rm is not permitted: {probe.stderr.decode().strip()}"
    return None


_CHILD = textwrap.dedent(
    """
    import contextlib, io, json, sys
    from statekeeper.checkpointers import FileCheckpointer
    from statekeeper.cli import main
    from statekeeper.errors import ReadOnlyError
    from statekeeper.memory.store import open_store

    root, memory, checkpoint = sys.argv[1], sys.argv[2], sys.argv[3]
    report = {}
    with FileCheckpointer(root) as saver:  # no mode: not writable, so read-only
        report["read_only"] = saver.read_only
        latest = saver.get_tuple({"configurable": {"thread_id": "t"}})
        report["latest"] = latest.checkpoint["id"]
        report["listed"] = len(list(saver.list(None)))
        report["writes"] = len(saver.get_writes(latest.config))
        report["api_verify"] = saver.verify()
        copied = dict(latest.checkpoint, id="1" + latest.checkpoint["id"][1:])
        writes = {
            "put": lambda: saver.put(latest.config, copied, {}, {}),
            "put_writes": lambda: saver.put_writes(latest.config, [("log", "x")], "task"),
            "delete_thread": lambda: saver.delete_thread("t"),
            "delete_for_runs": lambda: saver.delete_for_runs(["run"]),
            "copy_thread": lambda: saver.copy_thread("t", "copy"),
            "prune": lambda: saver.prune(["t"]),
            "claim_thread": lambda: saver.claim_thread("t").__enter__(),
            "repair": lambda: saver.verify(repair=True),
            "quarantine": lambda: saver.verify(quarantine=True),
        }
        report["writes_refused"] = []
        for name, write in writes.items():
            try:
                write()
            except ReadOnlyError as error:
                report["writes_refused"].append(name)
                report["write"] = str(error)
    with open_store("file://" + memory) as store:
        report["store_read_only"] = store.read_only
        report["item"] = store.get(("notes",), "k1").value
        try:
            store.put(("notes",), "k2", {"x": 1})
        except ReadOnlyError as error:
            report["store_write"] = str(error)
    url = "file://" + root + "?mode=ro"
    commands = {
        "threads": ["threads"],
        "history": ["history", "t"],
        "show": ["show", "t"],
        "diff": ["diff", "t"],
        "export": ["export"],
        "verify": ["verify"],
        "show-by-id": ["show", "t", "--checkpoint", checkpoint],
    }
    for name, argv in commands.items():
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["--db", url, *argv])
        report[name] = [code, out.getvalue()[:200], err.getvalue()]
    print(json.dumps(report, default=str))
    """
)


def test_a_read_only_mount_is_read_by_the_api_and_the_cli_and_nothing_is_created(
    tmp_path: Path,
) -> None:
    reason = _unshare_available()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the read-only mount test must run under CI: {reason}")
        pytest.skip(f"cannot make a read-only bind mount here: {reason}")
    root, memory = tmp_path / "store", tmp_path / "memory"
    seen = fill(root)
    with open_store(f"file://{memory}") as store:
        store.put(("notes",), "k1", {"text": "likes tea"})
    for lock in (memory / "locks").iterdir():
        lock.unlink()
    before = tree(tmp_path)
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    before[script.name] = tree(tmp_path)[script.name]
    mount = 'mount --bind -o ro "$1" "$1" && mount --bind -o ro "$2" "$2" && shift 2 && exec "$@"'
    latest = cp_id(seen["latest"].config)
    child = [sys.executable, str(script), str(root), str(memory), latest]
    done = subprocess.run(
        ["unshare", "-rm", "sh", "-c", mount, "sh", str(root), str(memory), *child],
        capture_output=True,
        check=False,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert done.returncode == 0, done.stderr.decode()
    report = json.loads(done.stdout)
    assert report["read_only"]
    assert report["store_read_only"]
    assert report["latest"] == latest
    assert report["listed"] == len(seen["all"])
    assert report["writes"] == len(seen["writes"])
    assert report["api_verify"] == []
    assert report["writes_refused"] == [
        "put",
        "put_writes",
        "delete_thread",
        "delete_for_runs",
        "copy_thread",
        "prune",
        "claim_thread",
        "repair",
        "quarantine",
    ]
    assert "read-only" in report["write"]
    assert "read-only" in report["store_write"]
    assert report["item"] == {"text": "likes tea"}
    for name in ("threads", "history", "show", "diff", "export", "verify", "show-by-id"):
        code, out, err = report[name]
        assert code == 0, f"statekeeper {name} on a read-only mount: {err}"
        assert out, name
        assert not err.startswith(f"statekeeper {name.split('-')[0]}:"), err
    assert tree(tmp_path) == before  # nothing created or changed, lock files included
