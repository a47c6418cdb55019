"""Threads moved out of and into LangGraph's own savers (``langgraph+sqlite://``,
``langgraph+postgres://``), exactly, and hostile payloads in them refused.

The LangGraph side is filled by LangGraph itself: a graph with a subgraph that
interrupts, a ``Send`` fan-out whose last worker fails once (pending writes and an
``__error__`` write), and a fork made with ``update_state`` on an earlier checkpoint. Its
threads are copied into every statekeeper backend and back into a fresh LangGraph saver;
on each side every checkpoint (ids, ``ts``, parents, versions, values), its metadata and
its pending writes (task paths included) are the same, ``get_state_history`` is the same
field by field, and the graph resumes to the same end.

PostgreSQL tests use the server at ``$POSTGRES_URL`` (default 127.0.0.1:5432, user
postgres), each in a schema of its own dropped afterwards; without a server they skip,
except under ``CI=true``, where they fail.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pickle
import re
import sqlite3
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import ormsgpack
import psycopg
import pytest
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite import SqliteSaver
from psycopg.conninfo import make_conninfo

from statekeeper.cli import EXIT, main
from statekeeper.errors import (
    ConfigurationError,
    RefusedValuesError,
    StorageNotFoundError,
)
from statekeeper.transfer import (
    copy_threads,
    export_threads,
    import_threads,
    list_threads,
    open_saver,
)
from tests.checkpointers.test_contract import strict, view
from tests.conftest import BACKENDS, Backend
from tests.test_transfer import (
    Note,
    build_graph,
    config,
    finish_run,
    history,
    run_to_failure,
    run_to_interrupt,
)

from langgraph.types import Command  # isort: skip

THREADS = ["failed", "paused", "forked"]
PG = os.environ.get("POSTGRES_URL") or "postgresql://postgres@127.0.0.1:5432/postgres"


# --------------------------------------------------------------------------------------------
# the LangGraph side
# --------------------------------------------------------------------------------------------


@pytest.fixture
def pg_schema() -> Iterator[Callable[[], str]]:
    """``make()``: a new, empty schema on the test server, dropped after the test."""
    try:
        conn = psycopg.connect(PG, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"no PostgreSQL at {PG} under CI: {exc}")
        pytest.skip(f"no PostgreSQL at {PG}: {exc}")
    made: list[str] = []

    def make() -> str:
        name = f"sk_lg_{uuid.uuid4().hex[:12]}"
        conn.execute(f'CREATE SCHEMA "{name}"')
        made.append(name)
        return name

    yield make
    for name in made:
        conn.execute(f'DROP SCHEMA "{name}" CASCADE')
    conn.close()


class Side:
    """Where one LangGraph saver keeps its data: its URL for the transfers, and the
    saver as LangGraph opens it itself (``native()``, its default serde)."""

    def __init__(self, kind: str, url: str, native: Callable[[], Any]) -> None:
        self.kind, self.url, self.native = kind, url, native


def with_query(url: str, **options: str) -> str:
    parts = urlsplit(url)
    query = [*parse_qsl(parts.query), *options.items()]
    return urlunsplit(parts._replace(query=urlencode(query)))


@pytest.fixture
def lg_side(tmp_path: Path, pg_schema: Any) -> Callable[[str], Side]:
    """``side(kind)``: a new, empty LangGraph saver of ``kind`` (sqlite, postgres)."""
    count = iter(range(100))

    def side(kind: str) -> Side:
        if kind == "sqlite":
            path = tmp_path / f"langgraph-{next(count)}.db"
            return Side(
                kind,
                f"langgraph+sqlite:///{path}",
                lambda: SqliteSaver.from_conn_string(str(path)),
            )
        schema = pg_schema()
        info = make_conninfo(PG, options=f"-c search_path={schema}")

        @contextlib.contextmanager
        def native() -> Iterator[Any]:
            with PostgresSaver.from_conn_string(info) as saver:
                saver.setup()
                yield saver

        return Side(kind, "langgraph+" + with_query(PG, schema=schema), native)

    return side


def fill(saver: Any) -> None:
    """LangGraph writes the threads: interrupted, failed with pending writes, and forked
    from an earlier checkpoint with ``update_state``."""
    run_to_failure(saver, "failed")
    run_to_interrupt(saver, "paused")
    graph = build_graph(saver)
    run_to_interrupt(saver, "forked")
    graph.invoke(Command(resume=["tides past", "tides now"]), config("forked"))
    before_finish = next(
        snap for snap in graph.get_state_history(config("forked")) if snap.next == ("finish",)
    )
    graph.update_state(before_finish.config, {"notes": [Note("fork", 4)]}, as_node="work")


def checkpoints(saver: Any, thread_id: str) -> list[Any]:
    """Every checkpoint of the thread with its metadata and pending writes, in
    ``strict`` form, by namespace and id."""
    tuples = list(saver.list({"configurable": {"thread_id": thread_id}}))
    tuples.sort(key=lambda t: (t.config["configurable"]["checkpoint_ns"], t.checkpoint["id"]))
    return [view(t) for t in tuples]


def task_paths(saver: Any, thread_id: str) -> list[Any]:
    """Every pending write with its task path (``get_writes``), by checkpoint. (The
    listing is read first: PostgresSaver holds its connection while ``list`` runs.)"""
    tuples = list(saver.list({"configurable": {"thread_id": thread_id}}))
    return sorted(
        (
            t.config["configurable"]["checkpoint_ns"],
            t.checkpoint["id"],
            strict([tuple(w) for w in saver.get_writes(t.config)]),
        )
        for t in tuples
    )


def forks(saver: Any, thread_id: str) -> list[str]:
    """The checkpoints of the thread's root namespace with more than one child."""
    parents = [
        t.parent_config["configurable"]["checkpoint_id"]
        for t in saver.list({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}})
        if t.parent_config is not None
    ]
    return sorted({p for p in parents if parents.count(p) > 1})


def assert_identical(a: Any, b: Any) -> None:
    assert sorted(list_threads(a)) == sorted(list_threads(b)) == sorted(THREADS)
    for thread_id in THREADS:
        assert checkpoints(a, thread_id) == checkpoints(b, thread_id), thread_id
        assert history(a, thread_id) == history(b, thread_id), thread_id


@contextlib.contextmanager
def statekeeper_target(backend: Backend, tmp_path: Path) -> Iterator[Any]:
    url = backend.url_for(tmp_path / "statekeeper")
    try:
        with open_saver(url) as saver:
            yield saver
    finally:
        if backend.cleanup is not None:
            backend.cleanup(url)


# --------------------------------------------------------------------------------------------
# there and back
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
@pytest.mark.parametrize("backend", BACKENDS, ids=str)
def test_langgraph_threads_go_to_every_backend_and_back_exactly(
    lg_side: Callable[[str], Side], kind: str, backend: Backend, tmp_path: Path
) -> None:
    original, back = lg_side(kind), lg_side(kind)
    with original.native() as native:
        fill(native)
    with (
        original.native() as native,
        open_saver(original.url, read_only=True) as source,
        statekeeper_target(backend, tmp_path) as ours,
        open_saver(back.url) as returned,
    ):
        assert source.thread_ids() == list_threads(native)  # listed without decoding
        stats = copy_threads(source, ours)
        assert stats.threads == 3
        assert stats.checkpoints == len(list(native.list(None)))
        assert stats.refusals == ()
        assert copy_threads(ours, returned).checkpoints == stats.checkpoints

        assert_identical(native, ours)
        assert_identical(native, returned)
        for thread_id in THREADS:
            assert task_paths(ours, thread_id) == task_paths(source, thread_id)
            assert task_paths(returned, thread_id) == task_paths(source, thread_id)
        copied = list(ours.list(None))
        assert any(w.task_path for t in copied for w in ours.get_writes(t.config))
        assert any(t.config["configurable"]["checkpoint_ns"] for t in copied)  # the subgraph
        assert forks(ours, "forked")

        with back.native() as native_back:
            for thread_id in THREADS:
                ends = [finish_run(saver, thread_id) for saver in (ours, native_back, native)]
                assert strict(ends[0]) == strict(ends[1]) == strict(ends[2])


def test_the_cli_moves_langgraph_threads_both_ways(
    lg_side: Callable[[str], Side], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    original, back = lg_side("sqlite"), lg_side("postgres")
    with original.native() as native:
        fill(native)
    ours = f"sqlite:///{tmp_path}/state.db"
    dump = tmp_path / "dump.jsonl"

    assert main(["copy", original.url, ours]) == EXIT["ok"]
    assert "copied 3 threads" in capsys.readouterr().out
    assert main(["export", "--db", original.url, "-o", str(dump)]) == EXIT["ok"]
    assert main(["--db", back.url, "import", str(dump)]) == EXIT["ok"]

    with (
        original.native() as native,
        back.native() as native_back,
        open_saver(ours) as copied,
        open_saver(original.url, read_only=True) as source,
        open_saver(back.url, read_only=True) as imported,
    ):
        assert_identical(native, copied)
        assert_identical(native, native_back)
        for thread_id in THREADS:
            assert task_paths(imported, thread_id) == task_paths(source, thread_id)


# --------------------------------------------------------------------------------------------
# opening
# --------------------------------------------------------------------------------------------


def test_a_missing_or_foreign_database_is_not_found_and_not_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "missing.db"
    code = main(["copy", f"langgraph+sqlite:///{missing}", f"sqlite:///{tmp_path}/t.db"])
    assert code == EXIT["not_found"]
    assert "no database at" in capsys.readouterr().err
    assert not missing.exists()
    assert not (tmp_path / "t.db").exists()

    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE notes (x)").connection.commit()
    with (
        pytest.raises(StorageNotFoundError, match="no LangGraph SqliteSaver tables"),
        open_saver(f"langgraph+sqlite:///{other}", read_only=True),
    ):
        pass
    with sqlite3.connect(other) as conn:
        assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master")] == ["notes"]


def test_an_unmigrated_postgres_schema_is_refused_as_a_source(pg_schema: Any) -> None:
    empty = pg_schema()
    with (
        pytest.raises(StorageNotFoundError, match="no LangGraph PostgresSaver tables"),
        open_saver("langgraph+" + with_query(PG, schema=empty), read_only=True),
    ):
        pass
    with psycopg.connect(PG, autocommit=True) as conn:
        tables = conn.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = %s", (empty,)
        ).fetchone()
        assert tables == (0,)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("langgraph+sqlite://host/x.db", "have no host"),
        ("langgraph+sqlite:///", "names no file"),
        ("langgraph+sqlite:///x.db?mode=ro", "take no options"),
        ("langgraph+postgres://u@h/db?schema=a;drop", "plain SQL name"),
        ("langgraph+mysql://h/db", "known schemes: .*langgraph\\+sqlite://"),
    ],
)
def test_bad_urls_are_refused_in_one_line(url: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message) as refused:
        open_saver(url)
    assert "\n" not in str(refused.value)


def test_other_commands_say_where_langgraph_urls_are_opened(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["threads", "--db", "langgraph+sqlite:///old.db"]) == EXIT["usage"]
    assert "only copy, export and import open" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("url", "module", "package"),
    [
        ("langgraph+sqlite:///x.db", "langgraph.checkpoint.sqlite", "langgraph-checkpoint-sqlite"),
        (
            "langgraph+postgres://u@h/db",
            "langgraph.checkpoint.postgres",
            "langgraph-checkpoint-postgres",
        ),
        ("langgraph+postgresql://u@h/db", "psycopg", "'psycopg[binary]'"),
    ],
)
def test_a_missing_package_is_named(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, url: str, module: str, package: str
) -> None:
    for name in list(sys.modules):
        if name.startswith("statekeeper.transfer._savers."):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, module, None)
    monkeypatch.chdir(tmp_path)

    with pytest.raises(
        ConfigurationError, match=re.escape(f"pip install {package}") + "$"
    ) as refused:
        open_saver(url)
    assert "\n" not in str(refused.value)
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------------------------
# hostile payloads
# --------------------------------------------------------------------------------------------


class _Reduce:
    def __init__(self, canary: Path) -> None:
        self.canary = canary

    def __reduce__(self) -> Any:
        return (os.system, (f"touch {self.canary}",))


def _os_system_call(canary: Path) -> bytes:
    return ormsgpack.packb(["os", "system", f"touch {canary}"])


def _constructor_json(canary: Path) -> bytes:
    envelope = {"lc": 2, "type": "constructor", "id": ["os", "system"], "args": [f"touch {canary}"]}
    return json.dumps(envelope).encode()


def _with_hostile_value(stored: bytes, channel: str, canary: Path) -> bytes:
    """A SqliteSaver checkpoint payload whose ``channel`` value calls ``os.system``."""
    checkpoint = ormsgpack.unpackb(
        stored, ext_hook=ormsgpack.Ext, option=ormsgpack.OPT_NON_STR_KEYS
    )
    checkpoint["channel_values"][channel] = ormsgpack.Ext(0, _os_system_call(canary))
    return ormsgpack.packb(checkpoint, option=ormsgpack.OPT_NON_STR_KEYS)


@pytest.fixture
def hostile_db(tmp_path: Path) -> tuple[str, Path, dict[str, Any]]:
    """A SqliteSaver database with a clean thread and a ``bad`` thread, whose stored
    payloads are made hostile: a pickle-typed checkpoint, a pickle-typed pending write, a
    constructor-style JSON write, and ``os.system`` in a channel value. Returns the URL,
    the canary file that running any of them would create, and where they are."""
    path, canary = tmp_path / "hostile.db", tmp_path / "pwned"
    with SqliteSaver.from_conn_string(str(path)) as saver:
        run_to_interrupt(saver, "clean")
        run_to_failure(saver, "bad")
    conn = sqlite3.connect(path)
    rows = conn.execute(
        "SELECT checkpoint_ns, checkpoint_id FROM checkpoints WHERE thread_id = 'bad' "
        "ORDER BY checkpoint_id"
    ).fetchall()
    (_, first), (_, second) = rows[0], rows[1]
    writes = conn.execute(
        "SELECT checkpoint_id, task_id, idx, channel FROM writes WHERE thread_id = 'bad' "
        "AND checkpoint_ns = '' ORDER BY checkpoint_id, task_id, idx"
    ).fetchall()
    pickled, constructed = writes[0], writes[-1]
    with conn:
        conn.execute(
            "UPDATE checkpoints SET type = 'pickle', checkpoint = ? WHERE thread_id = 'bad' "
            "AND checkpoint_id = ?",
            (pickle.dumps(_Reduce(canary)), first),
        )
        for (checkpoint_id, task_id, idx, _), (type_, value) in [
            (pickled, ("pickle", pickle.dumps(_Reduce(canary)))),
            (constructed, ("json", _constructor_json(canary))),
        ]:
            conn.execute(
                "UPDATE writes SET type = ?, value = ? WHERE thread_id = 'bad' AND "
                "checkpoint_id = ? AND task_id = ? AND idx = ?",
                (type_, value, checkpoint_id, task_id, idx),
            )
        (stored,) = conn.execute(
            "SELECT checkpoint FROM checkpoints WHERE thread_id = 'bad' AND checkpoint_id = ?",
            (second,),
        ).fetchone()
        conn.execute(
            "UPDATE checkpoints SET checkpoint = ? WHERE thread_id = 'bad' AND checkpoint_id = ?",
            (_with_hostile_value(stored, "topic", canary), second),
        )
    conn.close()
    return (
        f"langgraph+sqlite:///{path}",
        canary,
        {"first": first, "second": second, "pickled": pickled, "constructed": constructed},
    )


def test_hostile_payloads_are_refused_and_reported_and_nothing_is_written(
    hostile_db: tuple[str, Path, dict[str, Any]], tmp_path: Path
) -> None:
    url, canary, where = hostile_db
    live = canary.with_name("live")  # the payloads are live: LangGraph's own reader runs them
    JsonPlusSerializer(pickle_fallback=True).loads_typed(("pickle", pickle.dumps(_Reduce(live))))
    assert live.exists()
    with open_saver(url, read_only=True) as source, open_saver("memory://") as target:
        with pytest.raises(RefusedValuesError) as refused:
            copy_threads(source, target)
        assert list_threads(target) == []
        with pytest.raises(RefusedValuesError):
            export_threads(source, io.StringIO())
    assert not canary.exists()

    found = {(r.thread_id, r.checkpoint_id, r.channel): r.reason for r in refused.value.refusals}
    pickled_id, pickled_task = where["pickled"][0], where["pickled"][1]
    constructed_id, constructed_task = where["constructed"][0], where["constructed"][1]
    assert found.pop(("bad", where["first"], None)).startswith("a pickle payload")
    assert "os.system" in found.pop(("bad", where["second"], "channel 'topic'"))
    pickled_write = f"write to {where['pickled'][3]!r} by task {pickled_task!r}"
    assert found.pop(("bad", pickled_id, pickled_write)).startswith("a pickle payload")
    constructed_write = f"write to {where['constructed'][3]!r} by task {constructed_task!r}"
    assert "JSON constructor of os.system" in found.pop(("bad", constructed_id, constructed_write))
    assert found == {}
    assert all(r.thread_id == "bad" for r in refused.value.refusals)


def test_skip_refused_moves_the_clean_threads(
    hostile_db: tuple[str, Path, dict[str, Any]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, canary, _ = hostile_db
    target = f"sqlite:///{tmp_path}/state.db"

    assert main(["copy", url, target]) == EXIT["refused"]
    err = capsys.readouterr().err
    assert "4 stored value(s) in 1 thread(s) were refused" in err
    assert "thread 'bad'" in err
    with open_saver(target) as saver:
        assert list_threads(saver) == []
    assert main(["--json", "copy", url, target]) == EXIT["refused"]
    error = json.loads(capsys.readouterr().err)["error"]
    assert (error["code"], error["type"]) == ("refused", "RefusedValuesError")
    assert len(error["refusals"]) == 4
    assert error["refusals"][0].keys() == {
        "thread_id",
        "checkpoint_ns",
        "checkpoint_id",
        "channel",
        "reason",
    }

    assert main(["copy", url, target, "--skip-refused"]) == EXIT["refused"]
    out, err = capsys.readouterr()
    assert "copied 1 thread" in out
    assert "left out 1 thread holding refused values" in err
    assert err.count("thread 'bad'") == 4
    dump = tmp_path / "dump.jsonl"
    assert main(["export", "--db", url, "--skip-refused", "-o", str(dump)]) == EXIT["refused"]
    with open_saver(target) as saver, open_saver(url, read_only=True) as source:
        assert list_threads(saver) == ["clean"]
        assert checkpoints(saver, "clean") == checkpoints(source, "clean")
        with open_saver("memory://") as imported, dump.open() as src:
            assert import_threads(imported, src).threads == 1
            assert checkpoints(imported, "clean") == checkpoints(source, "clean")
    assert not canary.exists()


def test_a_pickled_blob_in_postgres_is_refused_by_channel(
    lg_side: Callable[[str], Side], tmp_path: Path
) -> None:
    side = lg_side("postgres")
    canary = tmp_path / "pwned"
    with side.native() as native:
        run_to_interrupt(native, "t")
        with native._cursor() as cur:
            row = cur.execute(
                "UPDATE checkpoint_blobs SET type = 'pickle', blob = %s WHERE channel = 'plan' "
                "RETURNING version",
                (pickle.dumps(_Reduce(canary)),),
            ).fetchone()
        assert row is not None
    with (
        open_saver(side.url, read_only=True) as source,
        open_saver("memory://") as target,
        pytest.raises(RefusedValuesError) as refused,
    ):
        copy_threads(source, target)
    assert not canary.exists()
    assert {r.channel for r in refused.value.refusals} == {"channel 'plan'"}
    assert all(r.reason.startswith("a pickle payload") for r in refused.value.refusals)
