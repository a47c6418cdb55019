"""The ``statekeeper`` command and the storage it is pointed at: the commands that only
read open it read-only, so they create nothing where there is nothing, work on a
read-only mount, and a write there stops with one line (exit 6); ``verify`` checks every
record through the backend's ``verify()``; ``threads`` says which threads a live run holds.
A hostile ``--db`` (no host, a bad port, a NUL, a server that refuses, storage of the wrong
kind or damaged) gets one line on stderr, at once, in a process of its own.

Every persistent backend of the shared list is exercised. The read-only mount cases need
``unshare -rm`` (root, or user namespaces); they skip with a reason where it is missing,
except under CI=true.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from statekeeper.checkpointers import open_checkpointer
from statekeeper.cli import EXIT, main
from tests.conftest import BACKENDS, Backend
from tests.test_cli import build_thread

ROOT = Path(__file__).resolve().parent.parent
PERSISTENT = [b for b in BACKENDS if b.persistent]
INSPECTIONS = [
    ["threads"],
    ["history", "t1"],
    ["show", "t1"],
    ["diff", "t1"],
    ["export", "-o", "-"],
    ["verify"],
]


@pytest.fixture(params=PERSISTENT, ids=str)
def stored(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """A URL of each persistent backend, holding nothing yet."""
    backend: Backend = request.param
    url = backend.url_for(tmp_path / "data")
    yield backend, url
    if backend.cleanup is not None:
        backend.cleanup(url)


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def created(tmp_path: Path, url: str) -> list[str]:
    """Everything that exists for ``url``: files under ``tmp_path``, or Redis keys under
    the URL's prefix."""
    if url.startswith("redis"):
        from tests.redis_servers import client_for

        prefix = parse_qs(urlsplit(url).query)["prefix"][0]
        client = client_for(url)
        try:
            return sorted(key.decode() for key in client.scan_iter(match=f"{prefix}*"))
        finally:
            client.close()
    # SQLite itself may add a WAL database's -wal and -shm files when a read-only
    # connection opens it in a writable folder (docs/sqlite.md): they hold no data
    return sorted(
        str(p.relative_to(tmp_path))
        for p in tmp_path.rglob("*")
        if not p.name.endswith(("-wal", "-shm"))
    )


def test_inspecting_missing_storage_is_not_found_and_creates_nothing(
    stored: tuple[Backend, str], tmp_path: Path, capsys: Any
) -> None:
    _, url = stored
    for argv in INSPECTIONS:
        code, out, err = cli(capsys, *argv, "--db", url)
        assert code == EXIT["not_found"], (argv, err)
        assert err.count("\n") == 1, err  # one line
        assert err.startswith(f"statekeeper {argv[0]}: no database at "), err
        assert out == ""
        assert created(tmp_path, url) == [], argv
    # the copy source too: the target is not touched either
    target = f"sqlite:///{tmp_path}/elsewhere/copy.db"
    code, _, err = cli(capsys, "copy", url, target)
    assert code == EXIT["not_found"], err
    assert created(tmp_path, url) == []


def test_a_mode_in_the_url_is_the_users_choice(tmp_path: Path, capsys: Any) -> None:
    url = f"sqlite:///{tmp_path}/new/state.db?mode=rw"
    code, out, _ = cli(capsys, "threads", "--db", url)
    assert (code, out) == (EXIT["ok"], "no threads\n")
    assert (tmp_path / "new" / "state.db").exists()  # asked for read-write: created


def test_a_write_to_storage_opened_read_only_is_one_line_and_exit_6(
    stored: tuple[Backend, str], tmp_path: Path, capsys: Any
) -> None:
    _, url = stored
    build_thread(url, "t1")
    before = created(tmp_path, url)
    read_only = f"{url}{'&' if '?' in url else '?'}mode=ro"
    for argv in (
        ["prune", "--all", "--yes"],
        ["prune", "t1", "--strategy", "delete", "--yes"],
        ["verify", "--repair"],
    ):
        code, _, err = cli(capsys, *argv, "--db", read_only)
        assert code == EXIT["read_only"], (argv, err)
        assert err.count("\n") == 1, err
        assert "read-only" in err
    assert created(tmp_path, url) == before
    code, out, _ = cli(capsys, "threads", "--db", read_only)  # reading is fine
    assert code == EXIT["ok"]
    assert out.splitlines()[1].split()[:2] == ["t1", "interrupted"]


def test_inspection_commands_succeed_and_change_nothing(
    stored: tuple[Backend, str], tmp_path: Path, capsys: Any
) -> None:
    _, url = stored
    build_thread(url, "t1")
    before = created(tmp_path, url)
    for argv in INSPECTIONS:
        code, _, err = cli(capsys, *argv, "--db", url)
        assert code == EXIT["ok"], (argv, err)
    assert created(tmp_path, url) == before


def test_threads_shows_a_claimed_thread_as_running_with_its_holder(
    stored: tuple[Backend, str], capsys: Any
) -> None:
    _, url = stored
    build_thread(url, "t1")
    with open_checkpointer(url) as saver, saver.claim_thread("t1"):
        code, out, _ = cli(capsys, "threads", "--db", url)
        assert code == EXIT["ok"]
        row = out.splitlines()[1]
        assert row.split()[:4] == ["t1", "running", "(pid", str(os.getpid())]
        code, out, _ = cli(capsys, "threads", "--db", url, "--json")
        [listed] = json.loads(out)
        assert listed["status"] == "running"
        assert listed["holder"]["pid"] == os.getpid()
    code, out, _ = cli(capsys, "threads", "--db", url)
    assert out.splitlines()[1].split()[:2] == ["t1", "interrupted"]


def test_verify_reports_intact_storage_and_repair_keeps_it_so(
    stored: tuple[Backend, str], capsys: Any
) -> None:
    _, url = stored
    build_thread(url, "t1")
    build_thread(url, "t2")
    for argv in (["verify"], ["verify", "--repair"]):
        code, out, err = cli(capsys, *argv, "--db", url)
        assert code == EXIT["ok"], err
        assert out.strip() == "2 threads, 8 checkpoints: all intact"


# -- a read-only mount --------------------------------------------------------------------

MOUNTED = """
import json, sys
from statekeeper.cli import main
url, commands = sys.argv[1], json.loads(sys.argv[2])
print(json.dumps([main([*argv, "--db", url]) for argv in commands]))
"""


def read_only_mounts(path: Path) -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "-rm", "sh", "-c", 'mount --bind -o ro "$1" "$1"', "sh", str(path)],
        capture_output=True,
    )
    return probe.returncode == 0


@pytest.mark.parametrize(
    "backend", [b for b in PERSISTENT if not b.name.startswith(("redis", "postgres"))], ids=str
)
def test_every_inspection_works_on_a_read_only_mount_and_writes_fail(
    backend: Backend, tmp_path: Path
) -> None:
    if not read_only_mounts(tmp_path):
        if os.environ.get("CI") == "true":
            pytest.fail("read-only bind mounts (unshare -rm) must work under CI")
        pytest.skip("read-only bind mounts need unshare -rm, which is not available here")
    url = backend.url_for(tmp_path / "data")
    build_thread(url, "t1")
    build_thread(url, "t2")
    before = {str(p): p.stat().st_mtime_ns for p in tmp_path.rglob("*")}
    commands = [*INSPECTIONS, ["prune", "--all", "--yes"], ["verify", "--repair"]]
    done = subprocess.run(
        [
            "unshare",
            "-rm",
            "sh",
            "-c",
            'mount --bind -o ro "$1" "$1" && exec "$2" -c "$3" "$4" "$5"',
            "sh",
            str(tmp_path),
            sys.executable,
            MOUNTED,
            url,
            json.dumps(commands),
        ],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    codes = json.loads(done.stdout.splitlines()[-1])
    inspected = [EXIT["ok"]] * len(INSPECTIONS)
    assert codes == [*inspected, EXIT["read_only"], EXIT["read_only"]], done.stderr
    assert "no database" not in done.stderr
    assert {str(p): p.stat().st_mtime_ns for p in tmp_path.rglob("*")} == before


# -- how the command opens storage, whatever the backends do with it ---------------------


@pytest.mark.parametrize(
    ("url", "read_only", "options"),
    [
        ("sqlite:///a.db", True, {"mode": "ro"}),
        ("file:///tmp/x?compress=false", True, {"mode": "ro"}),
        ("redis://localhost:6379/0?prefix=p", True, {"mode": "ro"}),
        ("sqlite:///a.db?mode=rw", True, {}),  # the user's choice wins
        ("memory://", True, {}),  # nothing outlives the process: nothing to protect
        ("sqlite:///a.db", False, {}),
    ],
)
def test_commands_that_only_read_ask_for_mode_ro(
    monkeypatch: pytest.MonkeyPatch, url: str, read_only: bool, options: dict[str, str]
) -> None:
    from statekeeper.cli import _common

    seen: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(
        "statekeeper.checkpointers.open_checkpointer",
        lambda url, **given: seen.append((url, given)),
    )
    _common.open_saver(url, read_only=read_only)
    assert seen == [(url, options)]


def test_missing_storage_and_read_only_storage_have_their_own_exit_codes() -> None:
    from statekeeper.cli._common import exit_code
    from statekeeper.errors import ReadOnlyError, StorageError, StorageNotFoundError

    assert exit_code(StorageNotFoundError("gone")) == EXIT["not_found"] == 3
    assert exit_code(ReadOnlyError("ro")) == EXIT["read_only"] == 6
    assert exit_code(StorageError("disk")) == EXIT["failed"]


# -- hostile --db: one line on stderr, at once, never a traceback ---------------------------

EXAMPLE = str(ROOT / "examples" / "approval_thread.jsonl")
RUN = ["run", "examples.approval_agent:graph", "--thread", "t1", "--input", '{"messages": []}']


def statekeeper(*argv: str) -> tuple[int, list[str], float]:
    """``statekeeper ARGV`` in a process of its own (what a user's terminal shows: log
    records a library prints, tracebacks): its exit code, stderr lines and seconds taken.
    A command that outlives the timeout fails the test."""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "statekeeper", *argv],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
        capture_output=True,
        text=True,
        timeout=20,
    )
    return done.returncode, done.stderr.splitlines(), time.monotonic() - started


def assert_one_line(argv: list[str], code: int, expected: str) -> str:
    """Run ``statekeeper --db URL COMMAND...``: it exits ``code`` within seconds, saying
    one line on stderr, about its command, that holds ``expected``; return that line."""
    got, lines, seconds = statekeeper(*argv)
    assert (got, len(lines)) == (code, 1), lines
    assert lines[0].startswith(f"statekeeper {argv[2]}: "), lines
    assert expected in lines[0], lines
    assert seconds < 10, f"took {seconds:.1f} s"
    return lines[0]


@pytest.mark.parametrize(
    ("url", "command", "expected"),
    [
        ("postgresql:///postgres", ["threads"], "names no host"),
        ("postgresql:///postgres", RUN, "names no host"),
        ("postgres://", ["threads"], "names no host"),
        ("postgresql://", ["import", EXAMPLE], "names no host"),
        ("postgres://?schema=x", ["threads"], "names no host"),
        ("postgresql://127.0.0.1:abc/postgres", ["threads"], "bad port"),
        ("postgresql://127.0.0.1:99999/postgres", RUN, "bad port"),
    ],
)
def test_a_postgres_url_without_a_host_or_with_a_bad_port_is_bad_usage_at_once(
    url: str, command: list[str], expected: str
) -> None:
    assert_one_line(["--db", url, *command], EXIT["usage"], expected)


def test_a_postgres_server_that_refuses_is_one_line_at_once() -> None:
    """Not ~20 lines of the pool's retries and the error after pool_timeout (30 s)."""
    url = "postgresql://postgres@127.0.0.1:1/postgres"
    for command in (["threads"], ["import", EXAMPLE]):
        assert_one_line(["--db", url, *command], EXIT["failed"], "Connection refused")


def test_a_postgres_database_or_role_that_does_not_exist_is_bad_usage_at_once() -> None:
    from tests.postgres_servers import POSTGRES

    parts = urlsplit(POSTGRES.base())
    host = parts.netloc.rpartition("@")[2]
    user = parts.username or "postgres"
    nodb = f"postgresql://{user}@{host}/nodb_{os.urandom(4).hex()}"
    nobody = f"postgresql://nobody_{os.urandom(4).hex()}@{host}{parts.path}"
    for url, expected in ((nodb, "does not exist; create it"), (nobody, "check the user")):
        for command in (["threads"], ["import", EXAMPLE]):
            assert_one_line(["--db", url, *command], EXIT["usage"], expected)


@pytest.mark.parametrize(
    ("url", "command"),
    [
        ("sqlite:///{tmp}/a%00b.db", ["import", EXAMPLE]),
        ("sqlite:///{tmp}/a%00b.db", RUN),
        ("sqlite:///{tmp}/a%00b.db", ["threads"]),
        ("file://{tmp}/x%00y", ["import", EXAMPLE]),
        ("file://{tmp}/%00", ["threads"]),
    ],
)
def test_a_nul_in_a_path_is_bad_usage(tmp_path: Path, url: str, command: list[str]) -> None:
    url = url.format(tmp=tmp_path)
    assert_one_line(["--db", url, *command], EXIT["usage"], "a path cannot contain NUL")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("command", [["threads"], ["import", EXAMPLE]])
def test_storage_of_the_wrong_kind_is_named_as_such(tmp_path: Path, command: list[str]) -> None:
    (tmp_path / "adir").mkdir()
    (tmp_path / "notes.txt").write_text("hi\n")
    sqlite, file = f"sqlite:///{tmp_path}/adir", f"file://{tmp_path}/notes.txt"
    assert_one_line(["--db", sqlite, *command], EXIT["usage"], "adir' is a directory, not a")
    assert_one_line(["--db", file, *command], EXIT["usage"], "txt' is a file, not a directory")


def test_a_log_that_is_a_directory_is_damage_with_its_path(tmp_path: Path) -> None:
    url = f"file://{tmp_path}/files"
    build_thread(url, "t1")
    (log,) = (tmp_path / "files" / "threads").glob("*/*/checkpoints")
    log.unlink()
    log.mkdir()
    for command in (["threads"], ["history", "t1"], ["show", "t1"]):
        said = assert_one_line(["--db", url, *command], EXIT["failed"], "is a directory, not a")
        assert str(log) in said
    code, lines, _ = statekeeper("--db", url, "verify")
    assert code == EXIT["failed"]
    assert not lines, lines  # verify lists the damage on stdout
    assert statekeeper("--db", url, "verify", "--repair")[0] == EXIT["failed"]  # found, fixed
    assert statekeeper("--db", url, "verify")[0] == EXIT["ok"]


def test_a_sqlite_database_missing_a_table_says_so(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/state.db"
    build_thread(url, "t1")
    with sqlite3.connect(tmp_path / "state.db") as conn:
        conn.execute("DROP TABLE heads")
    for command in (["threads"], ["verify"]):
        assert_one_line(["--db", url, *command], EXIT["failed"], "not a complete statekeeper")
