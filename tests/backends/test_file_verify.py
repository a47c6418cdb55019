"""The file backend's ``verify()`` on damage no read would notice: a ``threads`` folder
replaced by a file (every read and listing then says so, naming the path, rather than
finding no threads), and a thread folder deleted while the index still gives the thread
its newest checkpoint (reported; a repair rebuilds the index without it)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from statekeeper.checkpointers import FileCheckpointer
from statekeeper.errors import StorageError
from tests.checkpointers.test_contract import cfg, populate, thread, version_maker


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A directory of threads t1, t2 and t3."""
    folder = tmp_path / "state"
    with FileCheckpointer(folder) as saver:
        for thread_id in ("t1", "t2", "t3"):
            populate(saver, thread_id, version_maker(saver))
    return folder


def _reads(saver: Any) -> dict[str, Any]:
    return {
        "list(None)": lambda: list(saver.list(None)),
        "list(thread)": lambda: list(saver.list(thread("t1"))),
        "get_tuple": lambda: saver.get_tuple(cfg("t1")),
        "thread_heads": lambda: saver.thread_heads(limit=10),
        "copy_thread": lambda: saver.copy_thread("t1", "t9"),
    }


@pytest.mark.parametrize("mode", ["ro", "rw"])
def test_a_threads_folder_replaced_by_a_file_is_damage_and_reads_say_so(
    root: Path, mode: str
) -> None:
    shutil.rmtree(root / "threads")
    (root / "threads").write_text("not a folder")
    with FileCheckpointer(root, mode=mode) as saver:
        for name, read in _reads(saver).items():
            if mode == "ro" and name == "copy_thread":
                continue
            with pytest.raises(StorageError, match="is not a folder") as caught:
                read()
            assert str(root / "threads") in str(caught.value), name
            assert "\n" not in str(caught.value)
        [damage] = saver.verify()
        assert damage.path == str(root / "threads")
        assert damage.record == "index"
        assert "not a folder" in damage.reason
        if mode == "rw":
            assert saver.verify(repair=True, quarantine=True) == [damage]  # nothing to rebuild
    assert (root / "threads").read_text() == "not a folder"


def test_a_missing_thread_folder_the_index_lists_is_reported_and_repair_rebuilds(
    root: Path,
) -> None:
    shutil.rmtree(root / "threads" / "t2")
    with FileCheckpointer(root, mode="ro") as saver:
        [damage] = saver.verify()
    assert (damage.thread_id, damage.record) == ("t2", "index")
    assert damage.path == str(root / "threads" / "t2")
    assert "its folder is missing" in damage.reason
    with FileCheckpointer(root) as saver:
        [repaired] = saver.verify(repair=True)
        assert repaired.reason.endswith("[rebuilt from the threads]")
        assert saver.verify() == []
        assert [h.thread_id for h in saver.thread_heads(limit=10)] == ["t3", "t1"]


def test_a_deleted_thread_is_no_damage(root: Path) -> None:
    with FileCheckpointer(root) as saver:
        saver.delete_thread("t2")
        assert saver.verify() == []
