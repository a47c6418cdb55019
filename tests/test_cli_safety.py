"""The ``statekeeper`` command does not lose or leave behind what nobody asked for:
``prune`` shows what it would delete (``--dry-run``) and asks before deleting (``--yes``
in scripts), and a ``copy`` or an ``import`` that fails creates nothing on its target —
no database, no directory, no Redis key — on every persistent backend."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from statekeeper.cli import EXIT, main
from tests.conftest import BACKENDS, Backend
from tests.test_cli import build_thread
from tests.test_cli_storage import created
from tests.test_transfer import forge, payload

ROOT = Path(__file__).resolve().parent.parent
PERSISTENT = [b for b in BACKENDS if b.persistent]


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def history(capsys: pytest.CaptureFixture[str], db: str, thread: str) -> list[Any]:
    code, out, err = cli(capsys, "history", thread, "--db", db, "--json")
    assert code == EXIT["ok"], err
    return json.loads(out)  # type: ignore[no-any-return]


@pytest.fixture
def db(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path}/state.db"
    build_thread(url, "t1")
    build_thread(url, "t2")
    return url


@pytest.fixture(params=PERSISTENT, ids=str)
def stored(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """A URL of each persistent backend, holding nothing yet."""
    backend: Backend = request.param
    url = backend.url_for(tmp_path / "data")
    yield url
    if backend.cleanup is not None:
        backend.cleanup(url)


# -- prune: --dry-run, and a question before deleting ---------------------------------


def test_prune_dry_run_says_what_would_go_and_deletes_nothing(db: str, capsys: Any) -> None:
    before = {t: history(capsys, db, t) for t in ("t1", "t2")}
    code, out, err = cli(capsys, "prune", "--all", "--dry-run", "--db", db, "--json")
    assert code == EXIT["ok"], err
    plan = json.loads(out)
    assert plan["dry_run"] is True
    assert plan["strategy"] == "keep_latest"
    assert {t["thread_id"]: (t["checkpoints"], t["deleted"]) for t in plan["threads"]} == {
        "t1": (4, 3),
        "t2": (4, 3),
    }
    assert (plan["checkpoints"], plan["deleted"]) == (8, 6)

    code, out, _ = cli(capsys, "prune", "t1", "--strategy", "delete", "--dry-run", "--db", db)
    assert code == EXIT["ok"]
    assert out.splitlines()[0].split() == ["THREAD", "CHECKPOINTS", "WOULD", "DELETE"]
    assert out.splitlines()[1].split() == ["t1", "4", "4"]
    assert "would delete 1 thread (4 checkpoints); nothing was deleted" in out
    assert {t: history(capsys, db, t) for t in ("t1", "t2")} == before

    code, _, err = cli(capsys, "prune", "nope", "--dry-run", "--db", db)
    assert code == EXIT["not_found"]
    assert "no thread 'nope'" in err


def test_prune_dry_run_opens_the_storage_read_only(tmp_path: Path, capsys: Any) -> None:
    code, _, err = cli(capsys, "prune", "--all", "--dry-run", "--db", f"sqlite:///{tmp_path}/x.db")
    assert code == EXIT["not_found"], err
    assert list(tmp_path.iterdir()) == []


def test_prune_without_a_terminal_needs_yes(db: str, tmp_path: Path) -> None:
    """stdin is not a terminal (a pipe here): without --yes nothing is opened or deleted."""
    before = (tmp_path / "state.db").read_bytes()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for argv in (["prune", "t1"], ["prune", "--all", "--strategy", "delete", "--json"]):
        done = subprocess.run(
            [sys.executable, "-m", "statekeeper", *argv, "--db", db],
            input="y\n",  # an answer in a pipe is not someone at a terminal
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        assert done.returncode == EXIT["usage"], done.stderr
        assert done.stderr.count("\n") == 1, done.stderr
        assert "stdin is not a terminal; pass --yes" in done.stderr
        assert done.stdout == ""
    assert json.loads(done.stderr)["error"]["code"] == "usage"
    assert (tmp_path / "state.db").read_bytes() == before


def _prune_at_a_terminal(db: str, answer: bytes) -> tuple[int, str]:
    """``prune t1`` with stdin, stdout and stderr on a pseudo-terminal, typing ``answer``."""
    leader, follower = pty.openpty()
    child = subprocess.Popen(
        [sys.executable, "-m", "statekeeper", "prune", "t1", "--db", db],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
    )
    os.close(follower)
    seen = b""
    while b"[y/N]" not in seen:
        chunk = _read(leader)
        assert chunk, seen  # the child ended without asking
        seen += chunk
    os.write(leader, answer)
    while chunk := _read(leader):
        seen += chunk
    os.close(leader)
    return child.wait(timeout=60), seen.decode(errors="replace")


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, 4096)
    except OSError:  # EIO: the child closed its side
        return b""


def test_prune_asks_at_a_terminal_and_no_keeps_everything(db: str, capsys: Any) -> None:
    before = history(capsys, db, "t1")
    code, said = _prune_at_a_terminal(db, b"n\n")
    assert code == EXIT["refused"], said
    assert "prune 1 thread: delete up to 3 of their 4 checkpoints" in said
    assert "answered no; nothing was deleted" in said
    assert history(capsys, db, "t1") == before

    code, said = _prune_at_a_terminal(db, b"yes\n")
    assert code == EXIT["ok"], said
    assert "pruned 1 thread (keep_latest)" in said
    assert [row["step"] for row in history(capsys, db, "t1")] == [2]


@pytest.mark.parametrize(
    "argv",
    [
        ["prune", "t1", "--all", "--strategy", "delete", "-y"],
        ["prune", "t1", "--all", "--dry-run"],
        ["migrate", "t1", "--all"],
        ["--json", "prune", "--all", "t1", "--strategy", "delete", "-y"],
    ],
)
def test_threads_and_all_together_are_refused_and_nothing_is_touched(
    db: str, tmp_path: Path, capsys: Any, argv: list[str]
) -> None:
    """A named thread means that thread: with ``--all`` too, it is not read as every
    thread (which pruned the threads nobody named)."""
    before = {t: history(capsys, db, t) for t in ("t1", "t2")}
    with pytest.raises(SystemExit) as stopped:
        main([*argv, "--db", db])
    assert stopped.value.code == EXIT["usage"]
    out, err = capsys.readouterr()
    assert out == ""
    assert "name threads or pass --all, not both" in err
    assert "Traceback" not in err
    if "--json" in argv:
        assert json.loads(err)["error"]["code"] == "usage"
    assert {t: history(capsys, db, t) for t in ("t1", "t2")} == before


def test_prune_with_yes_does_not_ask(db: str, capsys: Any) -> None:
    code, out, err = cli(capsys, "prune", "--all", "--strategy", "delete", "--db", db, "--yes")
    assert (code, err) == (EXIT["ok"], "")
    assert out == "pruned 2 threads (delete)\n"


# -- a failed import or copy creates nothing ----------------------------------------------


@pytest.fixture
def dump(db: str, tmp_path: Path, capsys: Any) -> str:
    """A dump of the two threads of ``db``, as text."""
    path = tmp_path / "dump.jsonl"
    assert cli(capsys, "export", "--db", db, "-o", str(path))[0] == EXIT["ok"]
    return path.read_text()


def _bad_dumps(dump: str) -> dict[str, str | bytes]:
    lines = dump.splitlines(keepends=True)
    refused = [json.loads(line) for line in lines]
    refused[1]["values"] = {**refused[1]["values"], "log": payload(b"\x80\x04K.", "pickle")}
    return {
        "truncated": "".join(lines[:-1]),  # no trailer
        "cut": dump[: len(dump) // 2],
        "not-json": lines[0] + "{nope\n",
        "refused-record": forge(refused),  # a pickle payload, with a valid trailer
        "empty": "",
        "binary": b"\x89PNG\r\n\x1a\n\x00\xff",  # not UTF-8
        "utf-16": dump.encode("utf-16"),
        "a-bad-byte": (lines[0] + lines[1][:20]).encode() + b"\xff" + lines[1][20:].encode(),
    }


def test_a_failed_import_creates_nothing(
    stored: str, dump: str, tmp_path: Path, capsys: Any
) -> None:
    data = tmp_path / "data"
    for case, text in _bad_dumps(dump).items():
        path = tmp_path / f"{case}.jsonl"
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        code, out, err = cli(capsys, "import", str(path), "--db", stored)
        assert code == EXIT["failed"], (case, err)
        assert err.count("\n") == 1, (case, err)
        assert out == ""
        assert created(data, stored) == [], case


def test_an_import_into_an_unreachable_target_creates_nothing(
    dump: str, tmp_path: Path, capsys: Any
) -> None:
    path = tmp_path / "dump.jsonl"
    path.write_text(dump)
    (tmp_path / "a-file").write_text("")  # no database or directory can be made under it
    before = sorted(p.name for p in tmp_path.iterdir())
    for target in (
        f"sqlite:///{tmp_path}/a-file/state.db",
        f"file://{tmp_path}/a-file/data",
        "redis://127.0.0.1:1/0?prefix=unreachable&retries=0",
    ):
        code, out, err = cli(capsys, "import", str(path), "--db", target)
        assert code in (EXIT["failed"], EXIT["usage"]), (target, err)
        assert err.count("\n") == 1, (target, err)
        assert "Traceback" not in err
        assert out == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_an_import_refused_by_the_target_changes_nothing(
    db: str, dump: str, tmp_path: Path, capsys: Any
) -> None:
    """The target already has t1: refused before anything is written, t2 included."""
    path = tmp_path / "dump.jsonl"
    path.write_text(dump)
    other = f"sqlite:///{tmp_path}/other.db"
    build_thread(other, "t1")
    before = history(capsys, other, "t1")
    code, _, err = cli(capsys, "import", str(path), "--db", other)
    assert code == EXIT["refused"], err
    assert history(capsys, other, "t1") == before
    assert cli(capsys, "history", "t2", "--db", other)[0] == EXIT["not_found"]


def test_a_failed_copy_creates_nothing_on_the_target(
    stored: str, db: str, tmp_path: Path, capsys: Any
) -> None:
    data = tmp_path / "data"
    code, _, err = cli(capsys, "copy", db, stored, "--thread", "t1", "--thread", "nope")
    assert code == EXIT["not_found"], err
    assert "no thread 'nope' in sqlite:///" in err
    assert created(data, stored) == []
    missing = f"sqlite:///{tmp_path}/missing.db"
    code, _, err = cli(capsys, "copy", missing, stored)
    assert code == EXIT["not_found"], err
    assert created(data, stored) == []

    # the target has t1 already: refused, and t2 was not copied either
    assert cli(capsys, "copy", db, stored, "--thread", "t1")[0] == EXIT["ok"]
    before = created(data, stored)
    code, _, err = cli(capsys, "copy", db, stored)
    assert code == EXIT["refused"], err
    assert created(data, stored) == before
    assert cli(capsys, "history", "t2", "--db", stored)[0] == EXIT["not_found"]


class _CtrlC:
    """A progress bar that presses Ctrl-C once the third checkpoint is written."""

    def __init__(self, label: str) -> None:
        self.label = label

    def update(self, done: int, total: int | None, detail: str = "") -> None:
        if detail.startswith("threads, 3 checkpoints"):
            raise KeyboardInterrupt

    def done(self) -> None:
        pass


@pytest.mark.parametrize("command", ["copy", "import"])
def test_a_transfer_stopped_part_way_leaves_no_thread_behind(
    stored: str,
    db: str,
    dump: str,
    command: str,
    tmp_path: Path,
    capsys: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ctrl-C after three of eight checkpoints: the threads written are deleted again
    (exit 130), and what the target held before is untouched."""
    build_thread(stored, "kept")
    before = history(capsys, stored, "kept")
    path = tmp_path / "dump.jsonl"
    path.write_text(dump)
    monkeypatch.setattr("statekeeper.cli.transfer.progress", _CtrlC)
    argv = ["copy", db, stored] if command == "copy" else ["import", str(path), "--db", stored]
    code, out, err = cli(capsys, *argv)
    assert code == EXIT["stopped"], err
    assert out == ""
    for thread in ("t1", "t2"):
        assert cli(capsys, "history", thread, "--db", stored)[0] == EXIT["not_found"]
    assert history(capsys, stored, "kept") == before
    code, out, _ = cli(capsys, "threads", "--db", stored, "--json")
    assert [row["thread_id"] for row in json.loads(out)] == ["kept"]


@pytest.mark.parametrize("command", ["copy", "import"])
def test_a_transfer_stopped_part_way_into_new_storage_leaves_nothing_behind(
    stored: str,
    db: str,
    dump: str,
    command: str,
    tmp_path: Path,
    capsys: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ctrl-C after three of eight checkpoints, into storage that did not exist: the
    storage the command created is discarded too — no file, no folder, no key."""
    data = tmp_path / "data"
    path = tmp_path / "dump.jsonl"
    path.write_text(dump)
    monkeypatch.setattr("statekeeper.cli.transfer.progress", _CtrlC)
    argv = ["copy", db, stored] if command == "copy" else ["import", str(path), "--db", stored]
    code, out, err = cli(capsys, *argv)
    assert code == EXIT["stopped"], err
    assert out == ""
    assert created(data, stored) == []
    assert not data.exists()  # the folder the command made for it too
    if stored.startswith("postgres"):
        assert not _schema_exists(stored)
    if stored.startswith("sqlite"):
        assert not list(tmp_path.glob("data*"))  # no -wal or -shm either


def _schema_exists(url: str) -> bool:
    import psycopg

    schema = parse_qs(urlsplit(url).query)["schema"][0]
    with psycopg.connect(url.split("?", 1)[0].replace("postgres://", "postgresql://")) as conn:
        found = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,))
        return found.fetchone() is not None


def test_a_stopped_transfer_keeps_an_existing_empty_folder_and_what_is_in_it(
    db: str, tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder that was there before is never removed, nor anything the user put in it."""
    folder = tmp_path / "mine"
    folder.mkdir()
    monkeypatch.setattr("statekeeper.cli.transfer.progress", _CtrlC)
    code, _, err = cli(capsys, "copy", db, f"file://{folder}")
    assert code == EXIT["stopped"], err
    assert folder.is_dir()
    (folder / "other").mkdir()
    (folder / "other" / "keep.txt").write_text("mine")
    sqlite = f"sqlite:///{folder}/other/state.db"
    code, _, err = cli(capsys, "copy", db, sqlite)
    assert code == EXIT["stopped"], err
    assert sorted(p.name for p in (folder / "other").iterdir()) == ["keep.txt"]


def test_a_stopped_transfer_keeps_an_existing_empty_postgres_schema(
    db: str, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A schema that was there before, empty, is never dropped (as ``public`` may be)."""
    import psycopg

    from tests.postgres_servers import POSTGRES

    url = POSTGRES.url()
    schema = parse_qs(urlsplit(url).query)["schema"][0]
    try:
        with psycopg.connect(url.split("?", 1)[0].replace("postgres://", "postgresql://")) as c:
            c.execute(psycopg.sql.SQL("CREATE SCHEMA {}").format(psycopg.sql.Identifier(schema)))
        monkeypatch.setattr("statekeeper.cli.transfer.progress", _CtrlC)
        code, _, err = cli(capsys, "copy", db, url)
        assert code == EXIT["stopped"], err
        assert _schema_exists(url)
        code, out, _ = cli(capsys, "threads", "--db", url, "--json")
        assert (code, json.loads(out)) == (EXIT["ok"], [])
    finally:
        POSTGRES.cleanup(url)
