"""Redis read-only access: ``mode=ro`` reads everything and changes nothing -- no key is
created, modified or given another expiry, on open, on a TTL-refreshing read, on a
``list(None)`` that would sweep the registry --, every write raises ReadOnlyError; a
prefix with nothing stored is not found; a read-only replica refuses writes with
ReadOnlyError even in read-write mode; and the CLI inspects a read-only URL."""

from __future__ import annotations

import asyncio
import io
import json
import time
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import redis

from statekeeper.checkpointers import open_checkpointer
from statekeeper.cli import EXIT, main
from statekeeper.errors import ReadOnlyError, StorageNotFoundError
from statekeeper.memory.store import open_store
from tests.backends.test_redis import cfg, prefix_of, put
from tests.backends.test_redis_integrity import OTHER, THREAD, build, chat_graph, reads
from tests.redis_servers import REDIS, Server, client_for


@pytest.fixture
def url() -> Iterator[str]:
    made = REDIS.url("standalone")
    yield made
    REDIS.cleanup(made)


def snapshot(client: Any, prefix: str) -> dict[bytes, tuple[Any, ...]]:
    """Every key under ``prefix``: its type, content and absolute expiry (ms, -1: none)."""
    found = {}
    for key in client.scan_iter(match=f"{prefix}*", count=1000):
        kind = client.type(key)
        if kind == b"hash":
            content: Any = client.hgetall(key)
        elif kind == b"zset":
            content = client.zrange(key, 0, -1, withscores=True)
        else:
            content = client.get(key)
        found[key] = (kind, content, client.pexpiretime(key))
    return found


def _ro(url: str, **options: str) -> str:
    extra = "".join(f"&{name}={value}" for name, value in options.items())
    return f"{url}&mode=ro{extra}"


def test_read_only_reads_everything_and_changes_no_key(url: str) -> None:
    build(url)
    client = client_for(REDIS.prefixes[prefix_of(url)])
    prefix = prefix_of(url)
    with open_checkpointer(f"{url}&ttl=3600") as saver:  # every key gets an expiry
        put(saver, "expiring", {"a": 1})
        ids = [t.checkpoint["id"] for t in saver.list(cfg(THREAD))]
        expected = {name: read() for name, read in reads(saver, ids).items()}
    # a registry entry whose thread expired: a read-write list(None) sweeps it
    client.zadd(f"{prefix}:threads", {"gone": 1})
    client.incr(f"{prefix}:{{{prefix}:threads}}:count")
    before = snapshot(client, prefix)
    with open_checkpointer(_ro(url, ttl="60", refresh_on_read="true")) as saver:
        assert saver.read_only
        got = {name: read() for name, read in reads(saver, ids).items()}
        assert got.pop("list all") == [
            t for t in expected.pop("list all") if t.config["configurable"]["thread_id"] != "gone"
        ]
        assert got == expected
        assert saver.verify() == []
        state = chat_graph(saver).get_state({"configurable": {"thread_id": THREAD}})
        assert state.values["turn"] == 4
        assert asyncio.run(saver.aget_tuple(cfg(THREAD))) == expected["get_tuple latest"]
        assert snapshot(client, prefix) == before
        latest = saver.get_tuple(cfg(THREAD))
        writes = {
            "put": lambda: put(saver, THREAD, {"a": 2}),
            "put_writes": lambda: saver.put_writes(latest.config, [("log", ["x"])], "t"),
            "delete_thread": lambda: saver.delete_thread(THREAD),
            "delete_for_runs": lambda: saver.delete_for_runs(["r0"]),
            "copy_thread": lambda: saver.copy_thread(THREAD, "copy"),
            "prune": lambda: saver.prune([THREAD]),
            "claim_thread": lambda: saver.claim_thread(THREAD).__enter__(),
            "verify(repair=True)": lambda: saver.verify(repair=True),
            "graph.invoke": lambda: chat_graph(saver).invoke(
                {"log": ["more"]}, {"configurable": {"thread_id": OTHER}}
            ),
        }
        for name, write in writes.items():
            with pytest.raises(ReadOnlyError, match="read-only"):
                write()
            assert snapshot(client, prefix) == before, name
    assert snapshot(client, prefix) == before


def test_read_only_on_a_prefix_without_data_is_not_found_and_creates_nothing(url: str) -> None:
    client = client_for(REDIS.prefixes[prefix_of(url)])
    with pytest.raises(StorageNotFoundError, match="nothing was ever stored"):
        open_checkpointer(_ro(url))
    with pytest.raises(StorageNotFoundError, match="no memory store"):
        open_store(_ro(url))
    assert snapshot(client, prefix_of(url)) == {}
    with open_checkpointer(url):  # read-write opening marks the prefix as used
        pass
    with open_checkpointer(_ro(url)) as saver:  # then read-only finds it, empty
        assert saver.get_tuple(cfg(THREAD)) is None
        assert list(saver.list(None)) == []


def test_a_read_only_store_reads_and_refuses_writes(url: str) -> None:
    client = client_for(REDIS.prefixes[prefix_of(url)])
    with open_store(url) as store:
        store.put(("docs", "a"), "k1", {"text": "hello world"})
        store.put(("docs", "a"), "k2", {"text": "bye"}, ttl=60)
    before = snapshot(client, prefix_of(url))
    with open_store(_ro(url)) as store:
        assert store.read_only
        assert store.get(("docs", "a"), "k1").value == {"text": "hello world"}
        assert store.get(("docs", "a"), "k2", refresh_ttl=True).value == {"text": "bye"}
        assert sorted(i.key for i in store.search(("docs",), refresh_ttl=True)) == ["k1", "k2"]
        assert store.list_namespaces() == [("docs", "a")]
        for write in (
            lambda: store.put(("docs", "a"), "k3", {"text": "new"}),
            lambda: store.delete(("docs", "a"), "k1"),
            store.sweep_ttl,
        ):
            with pytest.raises(ReadOnlyError, match="read-only"):
                write()
        assert snapshot(client, prefix_of(url)) == before


# -- a read-only replica ---------------------------------------------------------------------


@pytest.fixture
def replica() -> Iterator[tuple[Server, Server]]:
    primary = REDIS.private("--repl-diskless-sync-delay", "0")  # sync the replica at once
    copy = REDIS.private("--replicaof", "127.0.0.1", str(primary.port))
    yield primary, copy
    copy.stop()
    primary.stop()


def _synced(primary: Server, copy: Server) -> None:
    """Wait until the replica has everything the primary has."""
    deadline = time.monotonic() + 10
    admin = redis.Redis(port=copy.port)
    while admin.info("replication").get("master_link_status") != "up":
        assert time.monotonic() < deadline, "the replica did not connect"
        time.sleep(0.05)
    assert redis.Redis(port=primary.port).wait(1, 5000) == 1


def test_a_replica_refuses_writes_with_read_only_error(replica: tuple[Server, Server]) -> None:
    primary, copy = replica
    on_primary = f"redis://127.0.0.1:{primary.port}/0?prefix=app"
    on_copy = f"redis://127.0.0.1:{copy.port}/0?prefix=app"
    build(on_primary, turns=2)
    with open_store(on_primary) as store:
        store.put(("docs",), "k", {"text": "hi"})
    _synced(primary, copy)
    with open_checkpointer(on_primary) as saver:
        expected = saver.get_tuple(cfg(THREAD))
    with open_checkpointer(on_copy) as saver:  # read-write: it opens, and reads
        assert not saver.read_only
        assert saver.get_tuple(cfg(THREAD)) == expected
        with pytest.raises(ReadOnlyError, match="read-only replica"):
            put(saver, THREAD, {"a": 1})
        with pytest.raises(ReadOnlyError, match="read-only replica"):
            saver.put_writes(expected.config, [("log", ["x"])], "t")
    with open_checkpointer(f"{on_copy}&mode=ro") as saver:
        assert saver.get_tuple(cfg(THREAD)) == expected
        assert saver.verify() == []
    with open_store(on_copy) as store:
        assert store.get(("docs",), "k").value == {"text": "hi"}
        with pytest.raises(ReadOnlyError, match="read-only replica"):
            store.put(("docs",), "k2", {"text": "no"})


# -- the CLI -------------------------------------------------------------------------------


def _cli(*argv: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue() + err.getvalue()


def test_the_cli_inspects_a_read_only_url_and_changes_nothing(url: str, tmp_path: Path) -> None:
    build(url)
    client = client_for(REDIS.prefixes[prefix_of(url)])
    before = snapshot(client, prefix_of(url))
    ro = _ro(url)
    with open_checkpointer(ro) as saver:
        newest = saver.get_tuple(cfg(THREAD)).checkpoint["id"]
    dump = tmp_path / "dump.jsonl"
    for argv in (
        ("threads", "--db", ro),
        ("history", THREAD, "--db", ro),
        ("show", THREAD, "--db", ro),
        ("show", THREAD, "--checkpoint", newest, "--db", ro),
        ("diff", THREAD, "--db", ro),
        ("export", "--db", ro, "-o", str(dump)),
        ("verify", "--db", ro),
    ):
        code, output = _cli(*argv)
        assert code == EXIT["ok"], (argv, output)
    assert THREAD in _cli("threads", "--db", ro, "--json")[1]
    lines = [json.loads(line) for line in dump.read_text().splitlines()]
    assert len(lines) > 2
    assert snapshot(client, prefix_of(url)) == before


def test_mode_and_on_corrupt_are_checked_options_and_fit_the_option_records(url: str) -> None:
    from statekeeper.backends.redis import RedisCheckpointerOptions, RedisOptions
    from statekeeper.checkpointers import RedisCheckpointer
    from statekeeper.errors import ConfigurationError
    from statekeeper.memory.store import RedisStore

    with pytest.raises(ConfigurationError, match="mode must be one of rw, ro, got 'rx'"):
        open_checkpointer(f"{url}&mode=rx")
    with pytest.raises(ConfigurationError, match="on_corrupt must be one of raise, fallback"):
        open_checkpointer(f"{url}&on_corrupt=ignore")
    with pytest.raises(ConfigurationError, match="mode must be one of"):
        open_store(f"{url}&mode=RO")
    build(url, turns=1)
    base, prefix = url.split("?", 1)[0], prefix_of(url)
    shared = RedisOptions(prefix=prefix, mode="ro")  # one record configures both
    with RedisCheckpointer(base, RedisCheckpointerOptions.extending(shared, ttl=60)) as saver:
        assert saver.read_only
        assert "mode='ro'" in repr(saver)
        assert saver.get_tuple(cfg(THREAD)) is not None
    with RedisCheckpointer(base, RedisOptions(prefix=prefix), on_corrupt="fallback") as saver:
        assert not saver.read_only
        assert saver.on_corrupt == "fallback"
    with open_store(f"{url}&mode=rw") as store:
        store.put(("n",), "k", {"v": 1})
    with RedisStore(base, shared) as store:
        assert store.read_only
        assert store.get(("n",), "k").value == {"v": 1}
