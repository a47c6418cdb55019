"""The file backend's index (``index/``): ``thread_heads`` and ``list(None)`` read a page of
it, not every thread, and never return other than what reading every thread returns —
whatever every write and maintenance did, however the index was damaged, truncated,
deleted or left behind by a writer killed mid-change, from another machine boot, or from
a directory written before it existed; ``verify()`` reports a damaged index and a repair
rebuilds it; two processes writing at once keep it right; read-only opens never write it.

The oracle of every check is :func:`scanned`: each thread's own listing, merged by hand.
Child processes are ``os.fork()``s that report through pipes (see tests/backends/test_file.py).
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import shutil
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6

from statekeeper.backends.file._log import catalog_write
from statekeeper.backends.file._log.catalog_files import (
    JournalWriter,
    journal_path,
    read_state,
    write_state,
)
from statekeeper.checkpointers import FileCheckpointer
from statekeeper.checkpointers.heads import Head
from tests.backends.test_file import fork, read_lines

LOGGER = "statekeeper.backends.file.checkpointer"
Where = tuple[str, str, str]  # (checkpoint id, thread id, namespace): the listing's order


# -- helpers ---------------------------------------------------------------------------------


def put(saver: Any, thread_id: str, ns: str = "", *, run_id: str | None = None) -> str:
    checkpoint = empty_checkpoint()
    checkpoint["id"] = str(uuid6())
    config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}
    metadata = {"step": 1, **({"run_id": run_id} if run_id else {})}
    saver.put(config, checkpoint, metadata, {})
    return checkpoint["id"]


def where(tup: Any) -> Where:
    c = tup.config["configurable"]
    return c["checkpoint_id"], c["thread_id"], c["checkpoint_ns"]


def scanned(saver: Any) -> tuple[list[Where], list[Head]]:
    """What reading every thread says, without the index: every checkpoint newest first
    (checkpoint id, thread, namespace, descending) and every thread's head in order."""
    found: list[Where] = []
    for thread_id in saver._store.thread_ids():
        found += [where(t) for t in saver.list({"configurable": {"thread_id": thread_id}})]
    found.sort(reverse=True)
    newest: dict[str, str] = {}
    for checkpoint_id, thread_id, ns in found:
        if ns == "" and thread_id not in newest:
            newest[thread_id] = checkpoint_id
    heads = sorted((Head(t, c) for t, c in newest.items()), key=lambda h: h.rank, reverse=True)
    return found, heads


def all_heads(saver: Any, size: int) -> list[Head]:
    found: list[Head] = []
    while page := saver.thread_heads(limit=size, after=found[-1] if found else None):
        found += page
    return found


def check_exact(saver: Any) -> None:
    """Every listing across threads is what reading every thread says: whole, in pages,
    below each checkpoint, and the thread index in pages of every size."""
    checkpoints, heads = scanned(saver)
    assert [where(t) for t in saver.list(None)] == checkpoints
    for limit in (1, 2, 5):
        assert [where(t) for t in saver.list(None, limit=limit)] == checkpoints[:limit]
    for at, (checkpoint_id, thread_id, _) in enumerate(checkpoints[:8]):
        before = {"configurable": {"thread_id": thread_id, "checkpoint_id": checkpoint_id}}
        below = [w for w in checkpoints if w[0] < checkpoint_id]
        assert [where(t) for t in saver.list(None, before=before, limit=3)] == below[:3], at
    for size in (1, 2, 100):
        assert all_heads(saver, size) == heads


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def saver(root: Path) -> Iterator[FileCheckpointer]:
    with FileCheckpointer(root, fsync=False) as opened:
        yield opened


@pytest.fixture
def unused(caplog: pytest.LogCaptureFixture) -> Callable[[], list[str]]:
    """The reasons logged for not using the index (none: every read above used it)."""
    caplog.set_level(logging.WARNING, logger=LOGGER)
    return lambda: [r.getMessage() for r in caplog.records if "index is not used" in r.getMessage()]


def some_threads(saver: Any, count: int = 6) -> None:
    for i in range(count):
        put(saver, f"t{i}", run_id=f"run-{i % 2}")
        if i % 2:
            put(saver, f"t{i}", "sub|1", run_id=f"run-{i % 2}")
        put(saver, f"t{i}", run_id="run-2")


def index_files(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "index").iterdir())


def append_line(root: Path, record: dict[str, Any]) -> None:
    """Append one well-formed line to the live journal, as a writer would (no lock: these
    tests write alone)."""
    state = read_state(root / "index")
    assert state is not None
    writer = JournalWriter(journal_path(root / "index", state.journal))
    try:
        writer.append([record], durable=False)
    finally:
        writer.close()


# -- kept by every write ---------------------------------------------------------------------


def test_every_write_and_maintenance_keeps_the_index_exact(
    saver: Any, root: Path, unused: Callable[[], list[str]]
) -> None:
    some_threads(saver)
    check_exact(saver)
    saver.copy_thread("t1", "copy")  # a subgraph namespace too; the same ids as the source
    check_exact(saver)
    saver.delete_for_runs(["run-2"])  # every thread falls back to an older head
    check_exact(saver)
    saver.prune(["t2", "t3"])  # keep_latest
    saver.prune(["t4"], strategy="delete")
    saver.delete_thread("t5")
    saver.delete_thread("never-there")
    check_exact(saver)
    put(saver, "t5")  # a deleted thread written again
    saver.delete_for_runs(["run-1"])  # t1 (and its copy) keep only what run-0 left: nothing
    check_exact(saver)
    assert unused() == []
    assert saver.verify() == []
    state = read_state(root / "index")
    assert state is not None
    assert state.base is not None  # what was read is what was kept
    assert saver._store.catalog.view() is not None


def test_the_journal_is_compacted_and_stays_bounded(
    root: Path, monkeypatch: pytest.MonkeyPatch, unused: Callable[[], list[str]]
) -> None:
    monkeypatch.setattr(catalog_write, "_JOURNAL_MIN", 2048)  # compact every few puts
    with FileCheckpointer(root, fsync=False) as saver:
        first = read_state(root / "index")
        for i in range(120):
            put(saver, f"t{i % 15}", "" if i % 4 else "sub")
            if i % 40 == 39:
                saver.delete_for_runs(["nothing"])
                saver.delete_thread(f"t{i % 15}")
        state = read_state(root / "index")
        assert first is not None
        assert state is not None
        assert state.journal > first.journal + 5
        journal = journal_path(root / "index", state.journal)
        assert journal.stat().st_size <= 2048 + 1024  # compacted past its threshold
        base = f"checkpoints-{state.base}", f"heads-{state.base}"
        assert index_files(root) == sorted([*base, journal.name, f"{journal.name}.head", "state"])
        check_exact(saver)
        assert saver.verify() == []
    assert unused() == []


# -- what a reader of a damaged, missing or stale index gets -----------------------------------


def _compaction_killed_midway(root: Path) -> Callable[[int], None]:
    def work(out: int) -> None:
        from statekeeper.backends.file._log.catalog import Catalog

        def die(self: Any, *args: Any) -> None:  # the journal switched, nothing merged yet
            os.write(out, b"merging\n")
            os.kill(os.getpid(), signal.SIGKILL)

        Catalog._merge = die  # type: ignore[method-assign]
        with FileCheckpointer(root, fsync=False) as saver:
            for i in range(100):
                put(saver, f"t{i % 7}")

    return work


def test_a_compaction_killed_midway_is_read_and_finished_by_the_next(
    root: Path, monkeypatch: pytest.MonkeyPatch, unused: Callable[[], list[str]]
) -> None:
    monkeypatch.setattr(catalog_write, "_JOURNAL_MIN", 2048)
    with FileCheckpointer(root, fsync=False) as saver:
        some_threads(saver)
    pid, out = fork(_compaction_killed_midway(root))
    assert read_lines(out, 1) == ["merging"]
    os.close(out)
    os.waitpid(pid, 0)
    frozen = read_state(root / "index")
    assert frozen is not None
    assert frozen.frozen is not None  # read between the sorted files and the live journal
    with FileCheckpointer(root, fsync=False) as saver:
        check_exact(saver)
        assert saver.verify() == []
        while (state := read_state(root / "index")) is not None and state.frozen is not None:
            put(saver, "t1")  # until the journal is due again: the next compaction merges it
        check_exact(saver)
        assert saver.verify() == []
    assert unused() == []


def test_a_compaction_that_meets_damage_stops_the_index_until_it_is_rebuilt(
    root: Path, monkeypatch: pytest.MonkeyPatch, unused: Callable[[], list[str]]
) -> None:
    monkeypatch.setattr(catalog_write, "_JOURNAL_MIN", 4096)
    with FileCheckpointer(root, fsync=False) as saver:
        some_threads(saver)
        path = _journal(root)
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0x01  # a committed line in the middle of the journal
        path.write_bytes(bytes(data))
        while (state := read_state(root / "index")) is not None and state.damaged is None:
            put(saver, "t1")  # writers append past it; the compaction reads it whole
        assert saver._store.catalog.view() is None
        check_exact(saver)
        assert {d.record for d in saver.verify()} == {"index"}
        assert unused()
    with FileCheckpointer(root, fsync=False) as saver:  # the next read-write open rebuilds it
        assert saver._store.catalog.view() is not None
        assert saver.verify() == []
        check_exact(saver)


def _journal(root: Path) -> Path:
    state = read_state(root / "index")
    assert state is not None
    return journal_path(root / "index", state.journal)


def _damage_journal_byte(root: Path) -> None:
    path = _journal(root)
    data = bytearray(path.read_bytes())
    data[-20] ^= 0x01  # in the last line
    path.write_bytes(bytes(data))


def _truncate_journal_mid_line(root: Path) -> None:
    path = _journal(root)
    path.write_bytes(path.read_bytes()[:-7])


def _truncate_journal_at_a_line(root: Path) -> None:
    path = _journal(root)
    lines = path.read_bytes().split(b"\n")[:-1]
    path.write_bytes(b"\n".join(lines[:-2]) + b"\n")


def _damage_base(root: Path, kind: str, cut: bool = False) -> None:
    state = read_state(root / "index")
    assert state is not None
    path = root / "index" / f"{kind}-{state.base}"
    data = bytearray(path.read_bytes())
    if cut:
        path.write_bytes(bytes(data[:-5]))
    else:
        data[-3] ^= 0x01
        path.write_bytes(bytes(data))


def _damage_state(root: Path) -> None:
    path = root / "index" / "state"
    path.write_bytes(path.read_bytes()[:-2] + b"!!")


def _delete_index(root: Path) -> None:
    shutil.rmtree(root / "index")


def _delete_journal_head(root: Path) -> None:
    path = _journal(root)
    path.with_name(path.name + ".head").unlink()


def _malformed_line(root: Path) -> None:
    append_line(root, {"t": "t2", "what": True})  # chained and checksummed, and no change


DAMAGE = {
    "a flipped bit in the journal": _damage_journal_byte,
    "the journal cut mid-line": _truncate_journal_mid_line,
    "the journal cut at a line": _truncate_journal_at_a_line,
    "the journal's head deleted": _delete_journal_head,
    "a flipped bit in the sorted checkpoints": lambda r: _damage_base(r, "checkpoints"),
    "the sorted heads cut mid-line": lambda r: _damage_base(r, "heads", cut=True),
    "the state damaged": _damage_state,
    "the index deleted": _delete_index,
    "a malformed line": _malformed_line,
}


@pytest.mark.parametrize("how", DAMAGE)
def test_a_damaged_index_reads_as_every_thread_then_verify_reports_and_repair_rebuilds(
    root: Path, how: str, unused: Callable[[], list[str]]
) -> None:
    with FileCheckpointer(root, fsync=False) as saver:
        some_threads(saver)
        saver.delete_for_runs(["run-0"])  # a compacted base and a journal over it
        some_threads(saver, 4)
    with FileCheckpointer(root, fsync=False) as saver:
        DAMAGE[how](root)
        check_exact(saver)
        assert unused()  # not used, and said why
        found = saver.verify()
        assert found
        assert {d.record for d in found} == {"index"}
        assert all(Path(d.path).is_relative_to(root / "index") for d in found)
        repaired = saver.verify(repair=True)
        assert [d.path for d in repaired] == [d.path for d in found]
        assert all(d.reason.endswith("[rebuilt from the threads]") for d in repaired)
        assert saver.verify() == []
        check_exact(saver)
        assert saver._store.catalog.view() is not None  # used again


def test_a_well_formed_false_entry_is_found_by_verify_and_repaired(saver: Any, root: Path) -> None:
    # a line that passes every check and is false (an older head than the thread's) is
    # what no read can tell without reading every thread: verify() reads them all
    some_threads(saver)
    append_line(root, {"h": "0", "t": "t3"})
    found = saver.verify()
    assert [(d.record, d.path) for d in found] == [("index", str(root / "index"))]
    assert "behind 1 threads ('t3')" in found[0].reason
    assert [d.path for d in saver.verify(repair=True)] == [d.path for d in found]
    assert saver.verify() == []
    check_exact(saver)


def test_a_damaged_index_is_rebuilt_by_the_next_read_write_open(root: Path) -> None:
    with FileCheckpointer(root, fsync=False) as saver:
        some_threads(saver)
    _damage_state(root)
    with FileCheckpointer(root, fsync=False, mode="ro") as reader:
        check_exact(reader)  # read-only: every thread read, nothing written
        assert reader._store.catalog.view() is None
    with FileCheckpointer(root, fsync=False) as saver:
        assert saver._store.catalog.view() is not None
        assert saver.verify() == []
        check_exact(saver)


def _killed_at(root: Path, where: str) -> Callable[[int], None]:
    """A child that puts a root checkpoint of ``t1`` and is SIGKILLed at ``where``:
    ``"announced"`` (its index line written, its checkpoint line not) or ``"committed"``
    (its checkpoint line written, the head it leaves not yet in the index)."""

    def work(out: int) -> None:
        from statekeeper.backends.file import _records
        from statekeeper.backends.file._log.catalog_write import Change

        saver = FileCheckpointer(root, fsync=False)
        commit = _records.Store.commit

        def die() -> None:
            os.write(out, f"{where}\n".encode())
            os.kill(os.getpid(), signal.SIGKILL)

        def commit_then_maybe_die(self: Any, *args: Any) -> None:
            if where == "announced":
                die()
            commit(self, *args)

        def finish(self: Any, *, ok: bool) -> None:
            die()

        _records.Store.commit = commit_then_maybe_die  # type: ignore[method-assign]
        if where == "committed":
            Change.finish = finish  # type: ignore[method-assign]
        put(saver, "t1")

    return work


@pytest.mark.parametrize("where", ["announced", "committed"])
def test_a_put_killed_mid_change_leaves_the_index_ahead_and_reads_exact(
    root: Path, where: str, unused: Callable[[], list[str]]
) -> None:
    with FileCheckpointer(root, fsync=False) as saver:
        some_threads(saver)
    pid, out = fork(_killed_at(root, where))
    assert read_lines(out, 1) == [where]
    os.close(out)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status)
    assert os.WTERMSIG(status) == signal.SIGKILL
    with FileCheckpointer(root, fsync=False) as saver:
        view = saver._store.catalog.view()
        assert view is not None
        assert "t1" in view.pending  # its head: read from the thread
        check_exact(saver)
        newest = saver.thread_heads(limit=1)[0]
        assert (newest.thread_id == "t1") == (where == "committed")
        assert saver.verify() == []  # ahead of the threads: no damage
        assert unused() == []
        put(saver, "t1")  # the next change of the thread settles it
        assert "t1" not in (saver._store.catalog.view() or view).pending
        check_exact(saver)


def test_an_index_written_before_the_machine_restarted_is_rebuilt_not_trusted(
    root: Path,
) -> None:
    with FileCheckpointer(root, fsync=False) as saver:
        some_threads(saver)
    state = read_state(root / "index")
    assert state is not None
    from dataclasses import replace

    # lines not flushed before a power loss may be gone: another boot's index is not used
    write_state(root / "index", replace(state, boot="another-boot"), durable=False)
    with FileCheckpointer(root, fsync=False, mode="ro") as reader:
        assert reader._store.catalog.view() is None
        check_exact(reader)
    assert read_state(root / "index") == replace(state, boot="another-boot")  # unwritten
    with FileCheckpointer(root, fsync=False) as saver:
        rebuilt = read_state(root / "index")
        assert rebuilt is not None
        assert (rebuilt.boot, rebuilt.journal > state.journal) == (state.boot, True)
        check_exact(saver)
        assert saver.verify() == []


# -- directories written before the index ------------------------------------------------------


def to_format_3(root: Path) -> None:
    """Make ``root`` what statekeeper wrote before the index (format 3)."""
    shutil.rmtree(root / "index")
    for name in os.listdir(root / "locks"):
        if name.startswith("@index"):
            (root / "locks" / name).unlink()
    (root / "statekeeper.json").write_text(
        json.dumps({"format": "statekeeper-file", "version": 3}) + "\n"
    )


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_a_format_3_directory_is_read_as_it_is_read_only_and_gains_the_index_read_write(
    root: Path, unused: Callable[[], list[str]]
) -> None:
    with FileCheckpointer(root, fsync=False) as saver:
        some_threads(saver)
        expected = scanned(saver)
    to_format_3(root)
    before = _tree(root)
    with FileCheckpointer(root, mode="ro") as reader:
        assert scanned(reader) == expected
        check_exact(reader)  # every thread read: there is no index
        assert reader.verify() == []
    assert _tree(root) == before  # read-only: no index, no lock file, no marker written
    with FileCheckpointer(root, fsync=False) as saver:  # read-write: built once, on open
        assert json.loads((root / "statekeeper.json").read_text())["version"] == 4
        assert saver._store.catalog.view() is not None
        check_exact(saver)
        assert scanned(saver) == expected
        assert saver.verify() == []
    assert unused() == []


def test_read_only_opens_never_write_the_index(root: Path) -> None:
    with FileCheckpointer(root, fsync=False) as saver:
        some_threads(saver)
    _delete_index(root)  # missing: read-write would rebuild it, read-only must not
    before = _tree(root)
    with FileCheckpointer(root, mode="ro") as reader:
        check_exact(reader)
        assert [d.record for d in reader.verify()] == ["index"]  # reported, not rebuilt
    assert _tree(root) == before
    assert not (root / "index").exists()


# -- cost: a page reads a page ----------------------------------------------------------------


def test_a_page_opens_a_page_of_threads_not_every_thread(
    saver: Any, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(40):
        put(saver, f"t{i:02d}")
    opened: list[str] = []
    real_open = os.open

    def counting_open(path: Any, *args: Any, **kwargs: Any) -> int:
        opened.append(str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", counting_open)
    heads = saver.thread_heads(limit=3)
    threads = {Path(p).relative_to(root / "threads").parts[0] for p in opened if "/threads/" in p}
    assert [h.thread_id for h in heads] == ["t39", "t38", "t37"]
    assert threads == {"t39", "t38", "t37"}  # each checked against its own log, no other
    opened.clear()
    listed = [where(t)[1] for t in saver.list(None, limit=2)]
    threads = {Path(p).relative_to(root / "threads").parts[0] for p in opened if "/threads/" in p}
    assert listed == ["t39", "t38"]
    assert threads <= {"t39", "t38", "t37"}


# -- several processes -------------------------------------------------------------------------


def test_two_processes_writing_at_once_keep_the_index_exact(
    root: Path, monkeypatch: pytest.MonkeyPatch, unused: Callable[[], list[str]]
) -> None:
    monkeypatch.setattr(catalog_write, "_JOURNAL_MIN", 4096)  # compactions race the writes
    FileCheckpointer(root, fsync=False).close()
    go_read, go_write = os.pipe()

    def worker(name: str) -> Callable[[int], None]:
        def work(out: int) -> None:
            os.read(go_read, 1)  # start together
            saver = FileCheckpointer(root, fsync=False)
            for i in range(60):
                put(saver, f"shared-{i % 4}", "" if i % 3 else "sub", run_id=f"{name}-{i % 5}")
                put(saver, f"{name}-{i % 6}")
                if i % 20 == 19:
                    saver.delete_for_runs([f"{name}-{i % 5}"])
                    saver.delete_thread(f"{name}-{i % 6}")
                    saver.copy_thread(f"shared-{i % 4}", f"{name}-copy-{i}")
            os.write(out, b"done\n")

        return work

    children = [fork(worker(name)) for name in ("a", "b")]
    os.write(go_write, b"xx")
    with FileCheckpointer(root, fsync=False) as reader:
        running = {pid for pid, _ in children}
        while running:  # read while they write: every listing is in order, and whole
            listed = [where(t) for t in reader.list(None, limit=10)]
            assert listed == sorted(listed, reverse=True)
            heads = reader.thread_heads(limit=5)
            assert [h.rank for h in heads] == sorted((h.rank for h in heads), reverse=True)
            for pid in list(running):
                if os.waitpid(pid, os.WNOHANG) != (0, 0):
                    running.discard(pid)
        assert [read_lines(out, 1) for _, out in children] == [["done"], ["done"]]
        check_exact(reader)
        assert reader.verify() == []
        state = read_state(root / "index")
        assert state is not None
        assert state.journal > 3  # compacted while they wrote
    assert unused() == []


def test_listing_through_the_index_while_a_thread_is_written_meanwhile(saver: Any) -> None:
    some_threads(saver)
    listing = saver.list(None)
    first = next(listing)
    newer = put(saver, "late")  # after the listing began: newer than all it returns
    rest = [where(t) for t in itertools.chain([first], listing)]
    assert rest == sorted(rest, reverse=True)
    assert newer not in {w[0] for w in rest[1:]}
    assert len(rest) == len(scanned(saver)[0]) - 1
