"""``statekeeper verify``'s summary: it counts the threads and checkpoints it checked even
when it finds damage (each problem listed once, not again by the reads that follow), and
a SQLite file without a single table is said to be an empty database, not "all intact"."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from statekeeper.checkpointers import open_checkpointer
from statekeeper.cli import EXIT, main
from tests.backends.test_redis import thread_key
from tests.conftest import BACKENDS, Backend
from tests.redis_servers import REDIS, client_for
from tests.test_cli import build_thread


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _garbage_manifest(url: str) -> None:
    root = Path(url.removeprefix("file://"))
    (root / "threads" / "t1" / "@namespaces").write_text("garbage\n")


def _overwritten_key(url: str) -> None:
    with open_checkpointer(url) as saver:
        key = thread_key(saver, "t1", "cp")
    client = client_for(REDIS.prefixes[url.split("prefix=", 1)[1]])
    client.delete(key)
    client.set(key, "written by another program")


DAMAGE: dict[str, Callable[[str], None]] = {
    "file": _garbage_manifest,
    "redis": _overwritten_key,
}


@pytest.mark.parametrize("name", sorted(DAMAGE))
def test_damage_found_still_counts_what_was_checked(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    backend: Backend = next(b for b in BACKENDS if b.name == name)
    url = backend.url_for(tmp_path)
    try:
        for thread_id in ("t1", "t2", "t3"):
            build_thread(url, thread_id)
        DAMAGE[name](url)
        code, out, _ = cli(capsys, "verify", "--db", url, "--json")
        report = json.loads(out)
        assert code == EXIT["failed"]
        assert report["threads"] == 3
        assert report["checkpoints"] >= 8  # t2's and t3's at least
        assert report["problems"]
        assert {p.get("thread_id") for p in report["problems"]} == {"t1"}  # once, by verify
        code, out, _ = cli(capsys, "verify", "--db", url)
        summary = out.splitlines()[0]
        assert summary == f"3 threads, {report['checkpoints']} checkpoints: " + (
            f"{len(report['problems'])} problems"
        )
    finally:
        if backend.cleanup is not None:
            backend.cleanup(url)


def test_a_0_byte_sqlite_file_is_an_empty_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "empty.db"
    path.write_bytes(b"")
    url = f"sqlite:///{path}"
    code, out, _ = cli(capsys, "verify", "--db", url)
    assert (code, out) == (
        EXIT["ok"],
        "0 threads, 0 checkpoints: no statekeeper tables: an empty database\n",
    )
    code, out, _ = cli(capsys, "verify", "--db", url, "--json")
    assert json.loads(out)["note"] == "no statekeeper tables: an empty database"
    assert path.read_bytes() == b""  # verify opened it read-only
    with open_checkpointer(url):  # a read-write open creates the tables
        pass
    code, out, _ = cli(capsys, "verify", "--db", url)
    assert (code, out) == (EXIT["ok"], "0 threads, 0 checkpoints: all intact\n")
