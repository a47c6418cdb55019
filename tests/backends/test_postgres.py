"""The PostgreSQL backend beyond the shared suites: URLs and their options, the schema and
its migrations (also from several processes at once), read-only opening, errors that say
what to do, and connections the server drops in the middle of a run. Real server only
(``tests/postgres_servers.py``)."""

from __future__ import annotations

import asyncio
import logging
import operator
import random
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict
from urllib.parse import urlencode, urlsplit

import psycopg
import pytest
from langgraph.graph import END, START, StateGraph

from statekeeper._storage.payload import ZLIB_DICT
from statekeeper.backends.postgres import CHECK_AFTER_IDLE, Freshness
from statekeeper.backends.postgres._database import lock_key
from statekeeper.backends.postgres._running import Q
from statekeeper.backends.postgres._writes import array_literal
from statekeeper.checkpointers import open_checkpointer
from statekeeper.errors import (
    ConfigurationError,
    InvalidIdError,
    ReadOnlyError,
    SchemaVersionError,
    StorageError,
    StorageNotFoundError,
)
from statekeeper.memory.store import open_store
from tests.postgres_servers import POSTGRES, Relay, connect

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def url() -> Iterator[str]:
    made = POSTGRES.url()
    yield made
    POSTGRES.cleanup(made)


def _schema(url: str) -> str:
    return url.rsplit("schema=", 1)[1].split("&", 1)[0]


def _config(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


# -- URLs and options ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("suffix", "message"),
    [
        ("&schema2=x", "unknown PostgreSQL option 'schema2'"),
        ("&pool_max_size=0", "pool sizes must satisfy"),
        ("&retries=soon", "retries must be a whole number"),
        ("&pool_timeout=inf", "PostgreSQL option pool_timeout must be a finite number, got 'inf'"),
        ("&pool_timeout=nan", "PostgreSQL option pool_timeout must be a finite number, got 'nan'"),
        ("&pool_timeout=1e12", "pool_timeout must be > 0 seconds (at most 2,147,483)"),
        ("&mode=rx", "mode must be one of rw, ro"),
    ],
)
def test_bad_options_are_configuration_errors(url: str, suffix: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        open_checkpointer(url + suffix)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"pool_max_size": "x"}, "option pool_max_size must be a whole number, got 'x' (str)"),
        ({"pool_min_size": 1.5}, "option pool_min_size must be a whole number, got 1.5 (float)"),
        ({"retries": True}, "option retries must be a whole number, got True (bool)"),
        ({"pool_check": "no"}, "option pool_check must be True or False, got 'no' (str)"),
        ({"pool_timeout": float("inf")}, "pool_timeout must be a finite number, got inf"),
        ({"pool_timeout": float("nan")}, "pool_timeout must be a finite number, got nan"),
        ({"pool_timeout": "5"}, "pool_timeout must be a finite number, got '5' (str)"),
        ({"schema": 5}, "option schema must be text, got 5 (int)"),
        ({"compress": "false"}, "option compress must be True or False, got 'false' (str)"),
        ({"compress": 2}, "option compress must be True or False, got 2 (int)"),
    ],
)
def test_keyword_options_are_held_to_the_rule_of_their_url_form(
    url: str, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(message)) as info:
        open_checkpointer(url, **options)
    assert "\n" not in str(info.value)
    with connect(url) as conn:  # refused before anything was created
        assert (
            conn.execute(
                "SELECT 1 FROM pg_namespace WHERE nspname = %s", (_schema(url),)
            ).fetchone()
            is None
        )


def test_a_connection_built_by_hand_is_checked_the_same_way() -> None:
    from statekeeper.backends.postgres import Connection

    for options, message in [
        ({"pool_max_size": "x"}, "option pool_max_size must be a whole number"),
        ({"pool_timeout": float("inf")}, "option pool_timeout must be a finite number"),
        ({"pool_timeout": 1e300}, "pool_timeout must be > 0 seconds (at most"),
    ]:
        with pytest.raises(ConfigurationError, match=re.escape(message)):
            Connection("postgresql://x@127.0.0.1/x", "x", **options).check()


@pytest.mark.parametrize("schema", ["1abc", 'a"b', "a;drop", "", "x" * 64, "a b"])
def test_a_schema_that_is_not_a_plain_name_is_refused(schema: str) -> None:
    base = POSTGRES.base()
    with pytest.raises(ConfigurationError, match="schema must be"):
        open_checkpointer(f"{base}?schema={schema}")


def test_both_schemes_open_the_same_schema_and_libpq_options_reach_the_server(url: str) -> None:
    name = f"sk-{uuid.uuid4().hex[:8]}"
    libpq = f"&application_name={name}&sslmode=disable&connect_timeout=5"
    with open_checkpointer(url + libpq) as saver:
        saver.put(
            {"configurable": {"thread_id": "t", "checkpoint_ns": ""}},
            _checkpoint(),
            {"step": 1},
            {},
        )
        with connect(url) as conn:
            seen = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (name,)
            ).fetchone()
        assert seen is not None
        assert seen[0] >= 1
    with open_checkpointer(url.replace("postgres://", "postgresql://", 1)) as again:
        assert again.get_tuple(_config("t")) is not None


def test_libpq_options_with_spaces_reach_the_server(url: str) -> None:
    # a space in a URL's query is %20 (or +): the server must see "-c ... -c ..."
    settings = "-c%20statement_timeout%3D12345%20-c%20lock_timeout%3D2345"
    with open_checkpointer(f"{url}&options={settings}") as saver:
        saver.put(_config("t"), _checkpoint(), {"step": 1}, {})

        def show() -> Any:
            a = yield Q("SHOW statement_timeout", fetch="one")
            b = yield Q("SHOW lock_timeout", fetch="one")
            return a, b

        assert saver._db.run(show) == (("12345ms",), ("2345ms",))


def test_the_put_statement_is_prepared_once_and_reused(url: str) -> None:
    # a statement is prepared after a few runs of one signature: checksums among the
    # parameters must not give it another signature at every call (int2, int4, int8...)
    with open_checkpointer(f"{url}&pool_max_size=1") as saver:
        parent = None
        for step in range(40):
            checkpoint = _checkpoint()
            checkpoint["channel_values"] = {"n": f"value {step}"}
            checkpoint["channel_versions"] = {"n": saver.get_next_version(None, None)}
            config = _config("t") if parent is None else parent
            parent = saver.put(config, checkpoint, {"step": step}, checkpoint["channel_versions"])

        def prepared() -> Any:
            rows = yield Q(
                "SELECT count(*) FROM pg_prepared_statements"
                " WHERE statement LIKE '%%INSERT INTO checkpoints%%'",
                fetch="one",
            )
            return rows[0]

        assert saver._db.run(prepared) == 1


def _checkpoint() -> Any:
    from langgraph.checkpoint.base import empty_checkpoint

    return empty_checkpoint()


def test_an_unreachable_server_is_a_storage_error_without_the_password() -> None:
    with pytest.raises(StorageError) as info:
        open_checkpointer(
            "postgres://postgres:s3cret@127.0.0.1:1/postgres?schema=x&pool_timeout=1"
            "&connect_timeout=1"
        )
    assert "s3cret" not in str(info.value)
    assert "127.0.0.1:1" in str(info.value)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("postgresql:///postgres", "names no host"),
        ("postgres://", "names no host"),
        ("postgresql://", "names no host"),
        ("postgres://?schema=x", "names no host"),
        ("postgres://user@/db", "names no host"),
        ("postgres://:5432/db", "names no host"),
        ("postgresql://127.0.0.1:abc/postgres", "bad port"),
        ("postgresql://127.0.0.1:99999/postgres", "bad port"),
        ("postgresql://127.0.0.1:0/postgres", "bad port"),
        ("postgresql://[::1]:x/postgres", "bad port"),
        ("postgresql://a:5432,b:nope/postgres", "bad port"),
        ("postgresql://127.0.0.1/postgres?port=-1", "bad port"),
    ],
)
def test_a_url_without_a_host_or_with_a_bad_port_is_refused_at_once(url: str, message: str) -> None:
    """Before: a traceback (psycopg.ProgrammingError) for no host, and 30 s of the pool's
    retries for a bad port."""
    started = time.monotonic()
    with pytest.raises(ConfigurationError, match=message) as info:
        open_checkpointer(url)
    assert time.monotonic() - started < 2
    assert "postgresql://HOST" in str(info.value) or "1 to 65535" in str(info.value)


def test_a_url_may_leave_out_the_database_or_give_the_host_as_an_option(url: str) -> None:
    """libpq's defaults: no database is the one named as the user; ``?host=`` names the
    host (a Unix socket's folder, or here a TCP host) of a URL with an empty authority."""
    parts = urlsplit(url)
    user, host = parts.username or "postgres", parts.hostname or "127.0.0.1"
    given = urlencode({"host": host, "port": parts.port or 5432, "user": user})
    as_option = f"postgresql://{parts.path}?{given}&{parts.query}"
    as_user = parts._replace(netloc=f"{user}@{parts.netloc.rpartition('@')[2]}", path="")
    opened = [as_option]
    if parts.path.strip("/") == user:  # the database named as the user is the one tested
        opened.append(as_user.geturl())
    for each in opened:
        with open_checkpointer(each) as saver:
            saver.put(_config("t"), _checkpoint(), {"step": 1}, {})
            assert saver.get_tuple(_config("t")) is not None


def _no_tls_server() -> bool:
    try:
        with psycopg.connect(POSTGRES.base(), sslmode="require", connect_timeout=5):
            return False
    except psycopg.OperationalError:
        return True


@pytest.mark.parametrize("failure", ["refused", "database", "role", "tls"])
def test_a_first_connection_that_cannot_work_fails_at_once_in_one_line(
    failure: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Opening connects once before the pool exists: a refused connection, an unknown
    database or role, a TLS mismatch end opening at once with one line saying where and
    what to do, and none of the pool's retries (30 s of them before, each logged)."""
    base = urlsplit(POSTGRES.base())
    user, host = base.username or "postgres", base.netloc.rpartition("@")[2]
    url, kind, said = {
        "refused": (f"postgres://{user}@127.0.0.1:1/db", StorageError, "server is up"),
        "database": (
            f"postgres://{user}@{host}/nodb_{uuid.uuid4().hex[:8]}",
            ConfigurationError,
            "createdb",
        ),
        "role": (
            f"postgres://nobody_{uuid.uuid4().hex[:8]}@{host}{base.path}",
            ConfigurationError,
            "check the user",
        ),
        "tls": (
            f"postgres://{user}@{host}{base.path}?sslmode=require",
            ConfigurationError,
            "sslmode",
        ),
    }[failure]
    if failure == "tls" and not _no_tls_server():
        pytest.skip("the server speaks TLS")
    for mode in ("rw", "ro"):
        started = time.monotonic()
        with caplog.at_level(logging.WARNING), pytest.raises(kind) as info:
            open_checkpointer(url, mode=mode)
        assert time.monotonic() - started < 5
        text = str(info.value)
        assert text.startswith(f"cannot connect to PostgreSQL at {url.split('?')[0]}: ")
        assert said in text
        assert "\n" not in text
        assert not [r for r in caplog.records if r.name.startswith("psycopg")]


# -- array parameters --------------------------------------------------------------------

HOSTILE_TEXT = [
    "",
    "NULL",
    "null",
    'say "hi"',
    "back\\slash",
    "{a,b}",
    " pad ",
    "é中\U0001f600",
    "\x01\x02",
]


@pytest.mark.parametrize(
    ("items", "cast"),
    [
        (HOSTILE_TEXT, "text[]"),
        ([None, "x", None], "text[]"),
        ([], "text[]"),
        ([0, -1, 2**63 - 1, -(2**63), None], "bigint[]"),
        ([b"", b"\x00\xff", bytearray(b"\\"), memoryview(b'"{,}'), None], "bytea[]"),
    ],
)
def test_array_literals_reach_the_server_exactly(url: str, items: list[Any], cast: str) -> None:
    """The puts send their lists as array text (``array_literal``): each item arrives as
    itself, whatever quotes, braces, backslashes or NULL-like text it holds."""
    with connect(url) as conn:
        row = conn.execute(f"SELECT %s::{cast}", (array_literal(items),)).fetchone()
    assert row is not None
    expected = [bytes(i) if isinstance(i, bytearray | memoryview) else i for i in items]
    assert row[0] == expected


def test_only_values_of_4_kb_and_more_are_compressed(url: str) -> None:
    """A chat turn's payloads are stored as they are; a large value is compressed."""
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    checkpoint = _checkpoint()
    checkpoint["channel_values"] = {"small": "ab" * 500, "large": "ab" * 5000}
    checkpoint["channel_versions"] = {"small": "1", "large": "1"}
    with open_checkpointer(url) as saver:
        saver.put(config, checkpoint, {}, {"small": "1", "large": "1"})
        found = saver.get_tuple(config)
    assert found is not None
    assert found.checkpoint["channel_values"] == checkpoint["channel_values"]
    with connect(url) as conn:
        codecs = dict(
            conn.execute(
                f"SELECT channel, codec FROM {_schema(url)}.blobs ORDER BY channel"
            ).fetchall()
        )
    assert codecs == {"large": ZLIB_DICT, "small": ""}


# -- schema and migrations ------------------------------------------------------------------


def test_opening_creates_the_schema_once_and_records_each_component(url: str) -> None:
    for _ in range(2):
        open_checkpointer(url).close()
        open_store(url).close()
    with connect(url) as conn:
        rows = conn.execute(
            f'SELECT component, version FROM "{_schema(url)}".statekeeper_migrations'
            " ORDER BY component"
        ).fetchall()
    assert rows == [("checkpoints", 1), ("checkpoints", 2), ("memory", 1)]


def test_processes_opening_a_new_schema_at_once_all_succeed(url: str) -> None:
    code = (
        f"import sys; sys.path.insert(0, {str(ROOT / 'src')!r})\n"
        "from statekeeper.checkpointers import open_checkpointer\n"
        f"open_checkpointer({url!r}).close(); print('ok')\n"
    )
    children = [
        subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    outputs = [child.communicate(timeout=120)[0] for child in children]
    assert [child.returncode for child in children] == [0] * 4
    assert outputs == ["ok\n"] * 4
    with connect(url) as conn:
        (count,) = conn.execute(
            f'SELECT count(*) FROM "{_schema(url)}".statekeeper_migrations'
        ).fetchone() or (0,)
    assert count == 2  # the checkpoints' two migrations, each applied once


def test_a_schema_from_a_newer_statekeeper_is_refused_untouched(url: str) -> None:
    open_checkpointer(url).close()
    with connect(url) as conn:
        conn.execute(
            f'INSERT INTO "{_schema(url)}".statekeeper_migrations'
            " (component, version, description) VALUES ('checkpoints', 99, 'future')"
        )
    with pytest.raises(SchemaVersionError, match="upgrade statekeeper"):
        open_checkpointer(url)


def test_opening_waits_for_the_migration_lock_at_most_pool_timeout(url: str) -> None:
    """A process stuck in the middle of migrating the schema (here: a session holding its
    migration lock) makes opening fail after ``pool_timeout`` with a one-line error saying
    what holds it up, instead of waiting for ever."""
    with connect(url) as holder:
        holder.execute("BEGIN")
        holder.execute(
            "SELECT pg_advisory_xact_lock(%s)", (lock_key("statekeeper-migrate", _schema(url)),)
        )
        # ends the wait anyway after 20 s, so a wait without a bound fails this test
        release = threading.Timer(20, holder.close)
        release.start()
        started = time.monotonic()
        try:
            with pytest.raises(StorageError, match="timed out waiting for a lock") as info:
                open_checkpointer(url + "&pool_timeout=2")
        finally:
            release.cancel()
        assert time.monotonic() - started < 15
    assert "pg_locks" in str(info.value)
    assert "\n" not in str(info.value)
    with open_checkpointer(url + "&pool_timeout=2") as saver:  # once the lock is released
        assert saver.get_tuple(_config("t")) is None


# -- read-only -----------------------------------------------------------------------------


def test_read_only_creates_nothing_and_refuses_writes(url: str) -> None:
    with pytest.raises(StorageNotFoundError, match="nothing was created"):
        open_checkpointer(url + "&mode=ro")
    with connect(url) as conn:
        found = conn.execute(
            "SELECT 1 FROM pg_namespace WHERE nspname = %s", (_schema(url),)
        ).fetchone()
    assert found is None
    with open_checkpointer(url) as saver:
        saver.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, _checkpoint(), {}, {})
    with open_checkpointer(url + "&mode=ro") as reader:
        assert reader.read_only
        assert reader.get_tuple(_config("t")) is not None
        with pytest.raises(ReadOnlyError):
            reader.delete_thread("t")
        with pytest.raises(ReadOnlyError):
            reader.put(
                {"configurable": {"thread_id": "u", "checkpoint_ns": ""}}, _checkpoint(), {}, {}
            )
        # the server itself refuses writes on its connections, whatever the code asks
        with pytest.raises(ReadOnlyError):
            reader._db.run(lambda: _delete_everything(), write=False)
    with open_checkpointer(url) as saver:
        assert saver.get_tuple(_config("t")) is not None


def _delete_everything() -> Any:
    from statekeeper.backends.postgres._running import Q

    yield Q("DELETE FROM checkpoints", fetch="count")


# -- dropped connections --------------------------------------------------------------------


class Counter(TypedDict):
    log: Annotated[list[str], operator.add]


def _counter_graph(saver: Any, during: Any) -> Any:
    def step(state: Counter) -> dict[str, Any]:
        n = len(state["log"])
        during(n)
        return {"log": [f"step {n}"]}

    builder = StateGraph(Counter)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_edge("step", END)
    return builder.compile(checkpointer=saver)


def _terminate(url: str, application_name: str) -> int:
    """Terminate every server session of ``application_name``; return how many."""
    with connect(url) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name = %s AND pid <> pg_backend_pid()",
            (application_name,),
        ).fetchall()
    return len(rows)


@pytest.mark.parametrize("pool_check", ["true", "false"])
def test_a_run_survives_the_server_dropping_its_connections(url: str, pool_check: str) -> None:
    name = f"sk-kill-{uuid.uuid4().hex[:8]}"
    killed: list[int] = []

    def during(n: int) -> None:
        if n in (3, 9):  # in the middle of a run (n is odd): the saver's connections go away
            killed.append(_terminate(url, name))

    with open_checkpointer(f"{url}&application_name={name}&pool_check={pool_check}") as saver:
        graph = _counter_graph(saver, during)
        for turn in range(8):
            graph.invoke({"log": [f"input {turn}"]}, _config("t"))
        assert len(killed) == 2
        assert all(killed)
        state = graph.get_state(_config("t")).values["log"]
        history = list(saver.list(_config("t")))
    expected = [entry for turn in range(8) for entry in (f"input {turn}", f"step {2 * turn + 1}")]
    assert state == expected  # no step lost, none run twice
    steps = [t.metadata["step"] for t in history]
    assert steps == sorted(set(steps), reverse=True)  # no checkpoint stored twice


def test_an_async_run_survives_the_server_dropping_its_connections(url: str) -> None:
    name = f"sk-akill-{uuid.uuid4().hex[:8]}"
    killed: list[int] = []

    def during(n: int) -> None:
        if n in (3, 9):  # mid-run (n is odd): the saver loses its connections
            killed.append(_terminate(url, name))

    async def run(saver: Any) -> tuple[list[str], list[int]]:
        graph = _counter_graph(saver, during)
        for turn in range(8):
            await graph.ainvoke({"log": [f"input {turn}"]}, _config("t"))
        state = (await graph.aget_state(_config("t"))).values["log"]
        steps = [t.metadata["step"] async for t in saver.alist(_config("t"))]
        return state, steps

    with open_checkpointer(f"{url}&application_name={name}") as saver:
        state, steps = asyncio.run(run(saver))
    assert len(killed) == 2
    assert all(killed)
    expected = [entry for turn in range(8) for entry in (f"input {turn}", f"step {2 * turn + 1}")]
    assert state == expected  # no step lost, none run twice
    assert steps == sorted(set(steps), reverse=True)  # no checkpoint stored twice


def test_an_idle_connection_the_server_dropped_is_replaced_before_use(url: str) -> None:
    name = f"sk-idle-{uuid.uuid4().hex[:8]}"
    options = f"&application_name={name}&retries=0&pool_min_size=1&pool_max_size=1"
    with open_checkpointer(url + options) as saver:
        graph = _counter_graph(saver, lambda n: None)
        graph.invoke({"log": ["input 0"]}, _config("t"))
        assert _terminate(url, name) == 1
        time.sleep(CHECK_AFTER_IDLE + 0.1)  # idle long enough to be checked
        graph.invoke({"log": ["input 1"]}, _config("t"))  # no retry left: the check did it
        assert graph.get_state(_config("t")).values["log"][-1] == "step 3"


def test_only_a_connection_idle_a_while_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    class Conn:  # connections are only weakly referenced
        pass

    now = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    fresh = Freshness()
    used, unknown = Conn(), Conn()
    fresh.alive(used)
    assert not fresh.needs_check(used)  # in steady use: handed out without a round trip
    assert fresh.needs_check(unknown)  # never seen alive here: checked
    now[0] += CHECK_AFTER_IDLE
    assert fresh.needs_check(used)  # idle that long: checked
    fresh.alive(used)
    assert not fresh.needs_check(used)


def test_a_write_that_cannot_reconnect_fails_cleanly_and_the_run_resumes(url: str) -> None:
    name = f"sk-kill-{uuid.uuid4().hex[:8]}"
    kill_at = {3}

    def during(n: int) -> None:
        if n in kill_at:
            kill_at.clear()
            _terminate(url, name)

    options = f"&application_name={name}&pool_check=false&retries=0&pool_min_size=1"
    with open_checkpointer(url + options) as saver:
        graph = _counter_graph(saver, during)
        graph.invoke({"log": ["input 0"]}, _config("t"))
        with pytest.raises(StorageError, match="lost the connection") as info:
            graph.invoke({"log": ["input 1"]}, _config("t"), durability="sync")
        assert "retry" in str(info.value)
        graph.invoke(None, _config("t"))  # resume where it stopped
        state = graph.get_state(_config("t")).values["log"]
    assert state.count("input 1") == 1
    assert state[:2] == ["input 0", "step 1"]
    assert len(state) == len(set(state))


async def _alisted(saver: Any, thread_id: str) -> Any:
    """The thread's newest checkpoint, read by ``alist``: on the loop's asyncio pool (the
    calls of a turn go to the serving thread instead)."""
    found = [t async for t in saver.alist(_config(thread_id), limit=1)]
    return found[0] if found else None


def test_the_async_api_works_from_one_event_loop_after_another(url: str) -> None:
    async def put_and_read(saver: Any, n: int) -> Any:
        config = {"configurable": {"thread_id": f"t{n}", "checkpoint_ns": ""}}
        await saver.aput(config, _checkpoint(), {"n": n}, {})
        assert (await saver.aget_tuple(config)).metadata == {"n": n}
        return (await _alisted(saver, f"t{n}")).metadata

    with open_checkpointer(url) as saver:
        # each asyncio.run has a loop of its own: the saver's asyncio pool follows it
        assert [asyncio.run(put_and_read(saver, n)) for n in range(3)] == [
            {"n": 0},
            {"n": 1},
            {"n": 2},
        ]


def _in_threads(*calls: Any, timeout: float) -> None:
    """Call each of ``calls`` in a thread of its own, at once; fail if one has not
    returned within ``timeout`` seconds (its thread is left behind then), and re-raise
    the first exception one raised."""
    raised: list[BaseException] = []

    def target(call: Any) -> None:
        try:
            call()
        except BaseException as exc:
            raised.append(exc)

    threads = [threading.Thread(target=target, args=(call,), daemon=True) for call in calls]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), f"not returned after {timeout} s"
    if raised:
        raise raised[0]


def test_an_event_loop_ends_while_its_asyncio_pool_is_still_connecting(url: str) -> None:
    """``asyncio.run`` returns when its loop ends while the saver's asyncio pool is still
    opening a connection (the server is slow to answer it: the relay holds it). The pool
    is closed on its loop as the loop ends. Before, psycopg_pool's worker task swallowed
    the cancellation the loop's end sent it, and ``asyncio.run`` waited for it forever
    (the hang of ``pytest -n 2``: a test's event loop ending while its pool connected)."""
    options = "&pool_min_size=2&pool_max_size=2"
    with Relay(url) as relay, open_checkpointer(relay.url(url) + options) as saver:
        relay.wait_for(2)  # the sync pool's connections
        relay.hold(passing=1)  # the asyncio pool opens two: one gets through
        _in_threads(lambda: asyncio.run(_alisted(saver, "t")), timeout=30)
        assert relay.accepted == 4  # so the other was still being opened at the end
        assert saver.get_tuple(_config("t")) is None  # and the saver still works


def test_event_loops_in_several_threads_each_keep_their_own_asyncio_pool(url: str) -> None:
    """Threads each running an event loop use one saver's async API in turns: each loop
    keeps its asyncio pool for the saver's life, whatever the other loops do. Before, a
    loop's first call closed the pool of the loop before it, from the wrong thread and
    under its calls, so every turn opened new connections (and leaked the pool's tasks)."""
    loops, turns = 3, 10
    barrier = threading.Barrier(loops)
    with Relay(url) as relay, open_checkpointer(relay.url(url) + "&pool_max_size=2") as saver:

        async def work(n: int) -> None:
            for turn in range(turns):
                config = {"configurable": {"thread_id": f"t{n}", "checkpoint_ns": ""}}
                await saver.aput(config, _checkpoint(), {"turn": turn}, {})
                found = await saver.aget_tuple(_config(f"t{n}"))
                assert found is not None
                assert found.metadata["turn"] == turn
                assert (await _alisted(saver, f"t{n}")).metadata["turn"] == turn
                barrier.wait(timeout=30)  # every loop has its turn before the next

        _in_threads(*[lambda n=n: asyncio.run(work(n)) for n in range(loops)], timeout=60)
        assert [len(list(saver.list(_config(f"t{n}")))) for n in range(loops)] == [turns] * 3
        # the sync pool's connections (also serving the calls of a turn) and each loop's
        # pool's: at most pool_max_size each
        assert relay.accepted <= 2 * (1 + loops)


def test_closing_the_saver_just_before_its_event_loop_ends_leaves_no_connection(
    url: str,
) -> None:
    """``close()`` inside ``asyncio.run``, right before the loop ends (``async def main():
    with open_checkpointer(...) as saver: ...``): the asyncio pool's connections are
    closed, although the loop's end cancels the closing halfway. Before, they stayed open
    until the garbage collector found them. (One pool size: a connection psycopg_pool is
    still opening when the loop ends is dropped by it, and closed when collected.)"""
    name = f"sk-close-{uuid.uuid4().hex[:8]}"

    async def main() -> None:
        options = f"&application_name={name}&pool_min_size=1&pool_max_size=1"
        with open_checkpointer(url + options) as saver:
            await saver.aget_tuple(_config("t"))
            await _alisted(saver, "t")

    asyncio.run(main())
    deadline = time.monotonic() + 10  # the server sees a closed session end a moment later
    with connect(url) as conn:
        while True:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (name,)
            ).fetchone()
            if row == (0,) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    assert row == (0,), f"{row} sessions of the closed saver are still open"


# -- ids too long to index ------------------------------------------------------------------


def _text(size: int) -> str:
    """``size`` bytes of UTF-8 that do not compress: random 1-, 2- and 3-byte characters."""
    rng = random.Random(size)
    chars: list[str] = []
    while size:
        width = min(size, rng.choice((1, 2, 3)))
        start = {1: 0x21, 2: 0x100, 3: 0x4E00}[width]
        chars.append(chr(rng.randrange(start, start + 90)))
        size -= width
    return "".join(chars)


def _put(saver: Any, thread_id: str, ns: str = "", checkpoint_id: str | None = None) -> Any:
    checkpoint = _checkpoint()
    if checkpoint_id is not None:
        checkpoint["id"] = checkpoint_id
    return saver.put(
        {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}, checkpoint, {}, {}
    )


def _row_counts(url: str) -> list[int]:
    with connect(url) as conn:
        return [
            conn.execute(f"SELECT count(*) FROM {_schema(url)}.{table}").fetchone()[0]  # type: ignore[index]
            for table in ("checkpoints", "blobs", "writes", "heads", "claims")
        ]


NEVER = "more than PostgreSQL can index: an index entry holds 2704 bytes once compressed"
TOO_LARGE = "cannot index this, it is too large: index row size"


def test_ids_too_long_to_index_are_refused_in_one_line_and_never_retried(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """They used to be "lost the connection ... retry it once the server answers": the
    server's "index row requires 12064 bytes" on a working connection, retried in vain.
    Ids no compression fits (1 MB) are refused before anything is sent; ids that do not
    compress (3 kB of random text) when the server refuses the row."""
    big, random_3k = "a" * 2**20, _text(3000)
    caplog.set_level(logging.INFO, logger="statekeeper")
    with open_checkpointer(url) as saver:
        stored = _put(saver, "t")
        before = _row_counts(url)
        attempts = [
            (
                lambda: _put(saver, big),
                f"namespace and checkpoint id are 1,048,612 bytes (UTF-8), {NEVER}",
            ),
            (lambda: _put(saver, "t", big), "namespace and checkpoint id are 1,048,613 bytes"),
            (lambda: saver.put_writes(stored, [("c", 1)], big), "checkpoint id and task id are"),
            (
                lambda: saver.copy_thread("t", big),
                f"a thread id is 1,048,576 bytes (UTF-8), {NEVER}",
            ),
            (lambda: saver.claim_thread(big).__enter__(), "a thread id is 1,048,576 bytes"),
            (lambda: asyncio.run(saver.aput(_config(big), _checkpoint(), {}, {})), NEVER),
            (lambda: asyncio.run(saver.acopy_thread("t", big)), NEVER),
            (
                lambda: _put(saver, random_3k),
                'exceeds btree version 4 maximum 2704 for index "checkpoints_pkey"',
            ),
            (lambda: _put(saver, "t", random_3k), TOO_LARGE),
            (lambda: saver.put_writes(stored, [("c", 1)], random_3k), '"writes_pkey"'),
            (lambda: saver.claim_thread(random_3k).__enter__(), '"claims_pkey"'),
            (lambda: asyncio.run(saver.aput(_config(random_3k), _checkpoint(), {}, {})), TOO_LARGE),
            (lambda: asyncio.run(saver.aput_writes(stored, [("c", 1)], random_3k)), TOO_LARGE),
        ]
        for attempt, message in attempts:
            with pytest.raises(InvalidIdError, match=re.escape(message)) as info:
                attempt()
            said = str(info.value)
            assert "\n" not in said
            assert "lost the connection" not in said
            assert "use shorter ids" in said
        assert _row_counts(url) == before
        assert "retrying" not in caplog.text  # none was run again as if the connection broke


def test_ids_up_to_2600_bytes_and_long_repetitive_ones_are_stored_and_read_back(
    url: str,
) -> None:
    """Whatever they hold (here: random text, which does not compress), ids totalling
    2600 bytes fit the server's index entries; 10,000 times "x" fits once compressed."""
    checkpoint_id = "1f0a0000-0000-6000-8000-000000000001"
    thread_id = _text(2600 - len(checkpoint_id) - 1)
    with open_checkpointer(url) as saver:
        stored = _put(saver, thread_id, "n", checkpoint_id)
        task_id = _text(2600 - len(thread_id.encode()) - 1 - len(checkpoint_id))
        saver.put_writes(stored, [("c", 1)], task_id)
        saver.copy_thread(thread_id, _text(2600 - len(checkpoint_id) - 1)[::-1])
        with saver.claim_thread(_text(2600)):
            pass
        got = saver.get_tuple(stored)
        assert got is not None
        assert got.config["configurable"]["thread_id"] == thread_id
        assert [w[0] for w in got.pending_writes or []] == [task_id]
        long = _put(saver, "x" * 10_000, "y" * 10_000)
        assert saver.get_tuple(long) is not None


def test_a_row_the_server_cannot_index_is_one_line_and_not_a_lost_connection(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A copy under a longer thread id than its source makes longer index entries: the
    server refuses them (SQLSTATE 54000). That is said in one line, as too large, never
    as a lost connection, and not retried."""
    with open_checkpointer(url) as saver:
        _put(saver, "s", _text(2000))
        caplog.set_level(logging.INFO, logger="statekeeper")
        target = _text(1000)
        with pytest.raises(InvalidIdError) as info:
            saver.copy_thread("s", target)
        said = str(info.value)
        assert TOO_LARGE in said
        assert "retrying cannot succeed" in said
        assert "lost the connection" not in said
        assert "\n" not in said
        assert "retrying" not in caplog.text  # not run again
        assert saver.get_tuple(_config(target)) is None  # nothing of the copy stored


def test_only_errors_that_end_the_session_count_as_a_lost_connection() -> None:
    from statekeeper.backends.postgres._running import lost

    errors = psycopg.errors
    assert lost(psycopg.OperationalError("server closed the connection unexpectedly"))
    assert lost(errors.AdminShutdown("terminating connection due to administrator command"))
    assert lost(errors.lookup("08006")("connection failure"))
    for live in (errors.ProgramLimitExceeded, errors.QueryCanceled, errors.LockNotAvailable):
        assert not lost(live("on a working connection"))
    assert not lost(errors.lookup("53100")("could not extend file: No space left on device"))
