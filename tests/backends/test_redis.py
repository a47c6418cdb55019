"""What only the Redis backend promises: URLs and options, the key layout and its hash
tags, id encoding that keeps threads and prefixes apart, TTLs, bounded work per call,
faults (a killed server, a killed writer), Cluster slots, and several processes resuming
each other's threads. Everything runs against real servers (tests/redis_servers.py)."""

from __future__ import annotations

import asyncio
import json
import operator
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict
from urllib.parse import quote

import pytest
import redis
import redis.cluster
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.graph import END, START, StateGraph

from statekeeper.backends.redis import RedisCheckpointerOptions, RedisOptions
from statekeeper.backends.redis._client import ASYNC_CONNECTIONS
from statekeeper.backends.redis._integrity.records import Record
from statekeeper.backends.redis._layout import swap
from statekeeper.checkpointers import RedisCheckpointer, known_schemes, open_checkpointer
from statekeeper.errors import (
    ConfigurationError,
    ReadOnlyError,
    SchemaVersionError,
    SerializationError,
    StorageError,
    ThreadBusyError,
)
from tests.redis_servers import REDIS, Server, client_for

ROOT = Path(__file__).resolve().parents[2]

# -- fixtures and helpers ------------------------------------------------------------------


@pytest.fixture
def url() -> Iterator[str]:
    made = REDIS.url("standalone")
    yield made
    REDIS.cleanup(made)


@pytest.fixture
def cluster_url() -> Iterator[str]:
    made = REDIS.url("cluster")
    yield made
    REDIS.cleanup(made)


@pytest.fixture
def private() -> Iterator[Server]:
    """A redis-server of this test's own, which it may kill and restart."""
    server = REDIS.private()
    yield server
    server.stop()


@pytest.fixture
def client(url: str) -> Iterator[redis.Redis]:
    plain = redis.Redis.from_url(url.split("?", 1)[0])
    yield plain
    plain.close()


def prefix_of(url: str) -> str:
    return url.split("prefix=", 1)[1]


def cfg(thread_id: str, ns: str = "", checkpoint_id: str | None = None) -> dict[str, Any]:
    configurable = {"thread_id": thread_id, "checkpoint_ns": ns}
    if checkpoint_id:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def put(saver: Any, thread_id: str, values: dict[str, Any], parent: Any = None, **md: Any) -> Any:
    """Store one checkpoint with a new version of every channel in ``values``."""
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = dict(values)
    versions = {ch: saver.get_next_version(None, None) for ch in values}
    checkpoint["channel_versions"] = versions
    config = parent or cfg(thread_id)
    return saver.put(config, checkpoint, {"source": "loop", "step": 0, **md}, versions)


def keys_of(client: Any, prefix: str) -> set[bytes]:
    return set(client.scan_iter(match=f"{prefix}*", count=1000))


THREAD_KEYS = ("ids", "ns", "cp", "blobs", "refs", "writes", "wix", "runs")  # the data keys


def thread_key(saver: Any, thread_id: str, name: str) -> bytes:
    """The key ``name`` (one of THREAD_KEYS, or ``claim``) of a thread, as docs/redis.md
    lays it out: ``<prefix>:{<tag>}:<name>``, the tag being the thread id percent-encoded
    (UTF-8, only ``A-Z a-z 0-9 _ . - ~`` kept)."""
    return f"{saver.prefix}:{{{quote(thread_id, safe='')}}}:{name}".encode()


def server_ms(client: Any) -> int:
    """The Redis server's clock, in ms (the clock its expiry times follow)."""
    seconds, micros = client.time()
    return int(seconds * 1000 + micros // 1000)


# -- URLs and options -------------------------------------------------------------------------


def test_redis_schemes_are_known() -> None:
    assert {"redis", "rediss", "redis+cluster", "rediss+cluster"} <= set(known_schemes())


@pytest.mark.parametrize(
    ("bad", "expected"),
    [
        ("redis://", "names no host"),
        ("redis:///0", "names no host"),
        ("redis://:pw@/0", "names no host"),
        ("redis://localhost:99999/0", "bad port"),
        ("redis://localhost:port/0", "bad port"),
        ("redis://localhost/abc", "bad database number 'abc'"),
        ("redis://localhost/-1", "bad database number"),
        ("redis://localhost/1/2", "bad database number"),
        ("redis+cluster://localhost:7000/1", "only database 0"),
        ("redis://localhost/0?colour=blue", "unknown Redis option 'colour'"),
        ("redis://localhost/0?ttl=soon", "ttl must be a number"),
        ("redis://localhost/0?ttl=-5", "ttl must be a number of seconds > 0"),
        ("redis://localhost/0?ttl=0", "ttl must be a number of seconds > 0"),
        ("redis://localhost/0?refresh_on_read=true", "refresh_on_read needs a ttl"),
        ("redis://localhost/0?refresh_on_read=maybe", "must be true or false"),
        ("redis://localhost/0?prefix=", "bad Redis key prefix"),
        ("redis://localhost/0?prefix=a%7Bb%7D", "bad Redis key prefix"),
        ("redis://localhost/0?prefix=a%20b", "bad Redis key prefix"),
        ("redis://localhost/0?prefix=a*", "bad Redis key prefix"),
        ("redis://localhost/0?retries=-1", "retries must be a whole number"),
        ("redis://localhost/0?socket_timeout=0", "socket_timeout must be seconds > 0"),
        ("rediss://localhost/0?ssl_cert_reqs=sometimes", "ssl_cert_reqs must be one of"),
        ("redis://localhost/0?prefix=a&prefix=b", "given twice"),
        ("redis://localhost/0?claim_ttl=0", "claim_ttl must be a number of seconds > 0"),
        ("redis://localhost/0?claim_ttl=soon", "claim_ttl must be a number"),
        ("redis://localhost/0?async_io=greenlets", "async_io must be one of threads, asyncio"),
    ],
)
def test_bad_urls_and_options_raise_configuration_errors(bad: str, expected: str) -> None:
    with pytest.raises(ConfigurationError, match=expected):
        open_checkpointer(bad)


@pytest.mark.parametrize(
    ("bad", "expected"),
    [
        ("ttl=inf", "option ttl must be a finite number, got 'inf'"),
        ("ttl=nan", "option ttl must be a finite number, got 'nan'"),
        ("ttl=1e300", "ttl must be a number of seconds > 0 (finite, at most 1,000,000,000)"),
        ("claim_ttl=inf", "option claim_ttl must be a finite number, got 'inf'"),
        ("claim_ttl=1e12", "claim_ttl must be a number of seconds > 0 (finite, at most"),
        ("socket_timeout=inf", "option socket_timeout must be a finite number, got 'inf'"),
        ("socket_timeout=nan", "option socket_timeout must be a finite number, got 'nan'"),
        ("socket_timeout=1e300", "socket_timeout must be seconds > 0 (finite, at most"),
    ],
)
def test_infinite_or_huge_seconds_in_a_url_are_refused(bad: str, expected: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(expected)):
        open_checkpointer(f"redis://localhost/0?{bad}")


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"compress": "false"}, "option compress must be True or False, got 'false' (str)"),
        ({"compress": 2}, "option compress must be True or False, got 2 (int)"),
        # the type first: not "refresh_on_read needs a ttl"
        ({"refresh_on_read": "maybe"}, "refresh_on_read must be True or False, got 'maybe'"),
        ({"refresh_on_read": 1, "ttl": 5}, "refresh_on_read must be True or False, got 1"),
        ({"ttl": "60"}, "option ttl must be a finite number or None, got '60' (str)"),
        ({"ttl": True}, "option ttl must be a finite number or None, got True (bool)"),
        ({"ttl": float("inf")}, "option ttl must be a finite number or None, got inf"),
        ({"ttl": float("nan")}, "option ttl must be a finite number or None, got nan"),
        ({"ttl": 1e300}, "ttl must be a number of seconds > 0 (finite, at most 1,000,000,000)"),
        ({"claim_ttl": float("inf")}, "option claim_ttl must be a finite number, got inf"),
        ({"claim_ttl": True}, "option claim_ttl must be a finite number, got True (bool)"),
        ({"socket_timeout": float("nan")}, "socket_timeout must be a finite number, got nan"),
        ({"retries": 2.0}, "option retries must be a whole number, got 2.0 (float)"),
        ({"retries": True}, "option retries must be a whole number, got True (bool)"),
        ({"prefix": 7}, "option prefix must be text, got 7 (int)"),
        ({"ssl_ca_certs": 3}, "option ssl_ca_certs must be text or a path or None, got 3"),
        ({"index_metadata": {"user"}}, "index_metadata must be text or a list or a tuple"),
    ],
)
def test_keyword_options_are_held_to_the_rule_of_their_url_form(
    url: str, client: redis.Redis, options: dict[str, Any], expected: str
) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(expected)) as info:
        open_checkpointer(url, **options)
    assert "\n" not in str(info.value)
    assert client.keys(f"{prefix_of(url)}:*") == []  # refused before anything is written


def test_the_class_checks_its_lifetimes_and_flags_too(url: str) -> None:
    base = url.split("?")[0]
    for lifetimes, expected in [
        ({"refresh_on_read": "maybe"}, "refresh_on_read must be True or False"),
        ({"ttl": float("inf")}, "ttl must be a number of seconds > 0 (finite"),
        ({"claim_ttl": float("nan")}, "claim_ttl must be a number of seconds > 0 (finite"),
        ({"ttl": True}, "ttl must be a number of seconds > 0"),
    ]:
        options = RedisCheckpointerOptions(prefix=prefix_of(url), **lifetimes)
        with pytest.raises(ConfigurationError, match=re.escape(expected)):
            RedisCheckpointer(base, options)
    with pytest.raises(ConfigurationError, match="option compress must be True or False"):
        RedisCheckpointer(base, RedisOptions(prefix=prefix_of(url)), compress="no")  # type: ignore[arg-type]


def test_query_options_are_parsed_and_keywords_win(url: str, client: redis.Redis) -> None:
    text = "compressible " * 1000
    with open_checkpointer(f"{url}&ttl=30&refresh_on_read=yes&compress=false") as saver:
        assert isinstance(saver, RedisCheckpointer)
        assert saver.prefix == prefix_of(url)
        assert saver.ttl == 30.0
        put(saver, "t", {"a": text})
        # compress=false: stored as is (compressed, it would take a few hundred bytes)
        (stored,) = client.hvals(thread_key(saver, "t", "blobs"))
        assert len(stored) > len(text)
        written = _deadlines(client, saver, "t")
        time.sleep(0.06)  # more than the 50 ms a deadline is rounded to on Redis 6.2
        saver.get_tuple(cfg("t"))
        assert _deadlines(client, saver, "t") != written  # refresh_on_read=yes
    with open_checkpointer(url) as saver:  # compress defaults to true
        put(saver, "u", {"a": text})
        (stored,) = client.hvals(thread_key(saver, "u", "blobs"))
        assert len(stored) < len(text) / 10
    with open_checkpointer(f"{url}&ttl=30", ttl=5) as saver:
        assert saver.ttl == 5
    with open_checkpointer(f"{url}&claim_ttl=2.5") as saver:
        before = server_ms(client)
        with saver.claim_thread("t"):
            left = client.pttl(thread_key(saver, "t", "claim"))
            elapsed = server_ms(client) - before
        assert 2_500 - elapsed - 1 <= left <= 2_500  # set (or renewed) to 2.5 s just now


def test_the_class_takes_keywords_not_query_options(url: str) -> None:
    with pytest.raises(ConfigurationError, match="pass options as keywords"):
        RedisCheckpointer(url)
    with RedisCheckpointer(url.split("?")[0], RedisOptions(prefix=prefix_of(url))) as saver:
        put(saver, "t", {"a": 1})
        assert saver.get_tuple(cfg("t")) is not None


def test_missing_redis_package_says_what_to_install() -> None:
    code = (
        "import sys\n"
        "sys.modules['redis'] = None\n"  # makes `import redis` fail
        "from statekeeper.checkpointers import open_checkpointer\n"
        "from statekeeper.errors import ConfigurationError\n"
        "try:\n"
        "    open_checkpointer('redis://127.0.0.1:6379/0')\n"
        "except ConfigurationError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'statekeeper[redis]'" in out.stdout


def test_errors_and_repr_name_the_server_but_never_the_password() -> None:
    server = REDIS.private("--requirepass", "hunter2")
    url = f"redis://default:hunter2@127.0.0.1:{server.port}/0?retries=1&prefix=x"
    try:
        with open_checkpointer(url) as saver:
            assert repr(saver) == (
                f"RedisCheckpointer('redis://default:***@127.0.0.1:{server.port}/0', prefix='x')"
            )
            put(saver, "t", {"a": 1})
            server.kill()
            with pytest.raises(StorageError) as info:
                saver.get_tuple(cfg("t"))
        message = str(info.value)
        assert f"default:***@127.0.0.1:{server.port}" in message
        assert "hunter2" not in message
        assert "cannot reach Redis" in message
        started = time.monotonic()
        with pytest.raises(StorageError, match="cannot reach Redis") as info:
            open_checkpointer(url)  # the server is still down: opening fails clearly too
        assert "hunter2" not in str(info.value)
        assert time.monotonic() - started < 10
    finally:
        server.stop()


def test_the_target_and_connection_never_show_the_password_in_reprs() -> None:
    from statekeeper.backends.redis._client import RedisTarget
    from statekeeper.urls import parse_url

    raw = "redis://app:hunter2@127.0.0.1:6379/0"
    target = RedisTarget.from_url(parse_url(raw, ["redis"]))
    assert target.password == "hunter2"  # still used to connect...
    assert "hunter2" not in repr(target)  # ...but never shown (tracebacks, logs)
    assert "hunter2" not in str(target)


# -- key layout and encoding -------------------------------------------------------------


def test_every_key_of_a_thread_shares_its_hash_tag_and_stays_under_the_prefix(
    url: str, client: redis.Redis
) -> None:
    prefix = prefix_of(url)
    with open_checkpointer(url) as saver:
        stored = put(saver, "thread-1", {"a": "x" * 5000, "b": [1, 2]}, run_id="run-1")
        saver.put_writes(stored, [("a", 1)], "task")
    assert keys_of(client, prefix) == {
        f"{prefix}:layout".encode(),
        f"{prefix}:threads".encode(),
        f"{prefix}:{{{prefix}:threads}}:count".encode(),
        # the thread index and the checkpoint index, in the registry's slot
        f"{prefix}:{{{prefix}:threads}}:heads".encode(),
        f"{prefix}:{{{prefix}:threads}}:head".encode(),
        f"{prefix}:{{{prefix}:threads}}:checkpoints".encode(),
        f"{prefix}:{{{prefix}:threads}}:checkpoints:by-thread".encode(),
        *(
            f"{prefix}:{{thread-1}}:{name}".encode()
            for name in ("ids", "ns", "cp", "blobs", "refs", "writes", "wix", "runs")
        ),
    }
    registry_keys = [k for k in keys_of(client, prefix) if b"{" + prefix.encode() in k]
    assert {redis.cluster.key_slot(k) for k in registry_keys} == {
        redis.cluster.key_slot(f"{prefix}:threads".encode())
    }
    thread_keys = [k for k in keys_of(client, prefix) if b"{thread-1}" in k]
    assert len({redis.cluster.key_slot(k) for k in thread_keys}) == 1
    assert client.zrange(f"{prefix}:threads", 0, -1) == [b"thread-1"]
    # the registry's count shares the registry's slot
    counter = f"{prefix}:{{{prefix}:threads}}:count".encode()
    assert redis.cluster.key_slot(counter) == redis.cluster.key_slot(f"{prefix}:threads".encode())
    assert client.get(counter) == b"1"


ODD_IDS = [
    "a:b",
    "*",
    "t-*",
    "{t}",
    "}",
    "{",
    "?",
    "[a-z]",
    "a b",
    "線程 🚀",
    "a\x00b",
    "x" * 3000,
    "%41",
    "A",
    "threads",
    "layout",
    "t}:ids",
]


def test_odd_ids_are_encoded_into_distinct_tags_of_safe_characters(
    url: str, client: redis.Redis
) -> None:
    prefix = prefix_of(url)
    with open_checkpointer(url) as saver:
        for tid in ODD_IDS:
            put(saver, tid, {"who": tid})
        tags = set()
        for key in keys_of(client, prefix):
            rest = key.decode()[len(prefix) + 1 :]
            names = ("count", "heads", "head", "checkpoints", "checkpoints:by-thread")
            registry = [f"{{{prefix}:threads}}:{name}" for name in names]
            if rest in ("layout", "threads", *registry):
                continue
            assert rest.startswith("{")
            tag, _, name = rest[1:].partition("}:")
            assert name in ("ids", "ns", "cp", "blobs", "refs", "runs"), key
            assert all((c.isalnum() and c.isascii()) or c in "%_.-~" for c in tag), key
            tags.add(tag)
        assert len(tags) == len(ODD_IDS)
        for tid in ODD_IDS:
            tup = saver.get_tuple(cfg(tid))
            assert tup is not None
            assert tup.checkpoint["channel_values"] == {"who": tid}
        assert sorted(t.config["configurable"]["thread_id"] for t in saver.list(None)) == sorted(
            ODD_IDS
        )


def test_deleting_and_pruning_never_touch_other_prefixes_or_foreign_keys(
    url: str, client: redis.Redis
) -> None:
    prefix = prefix_of(url)
    neighbour = f"{prefix}x"  # a prefix that extends ours
    nested = f"{prefix}:threads"  # a prefix that starts with our registry's key
    planted = {
        f"{prefix}:{{t}}:other": "hash",
        f"{prefix}:{{t}}x:ids": "string",
        f"{prefix}:{{t}}": "string",
        f"{prefix}:{{t*}}:ids": "string",
        f"{prefix}:threadsX": "string",
        f"{prefix}:{{%74}}:ids": "string",  # a tag that decodes to "t" if decoded twice
    }
    for key, kind in planted.items():
        if kind == "hash":
            client.hset(key, "f", "planted")
        else:
            client.set(key, "planted")
    try:
        with (
            open_checkpointer(url) as saver,
            open_checkpointer(url.replace(prefix, neighbour)) as other,
            open_checkpointer(url.replace(prefix, nested)) as tricky,
        ):
            for s in (saver, other, tricky):
                first = put(s, "t", {"a": 1})
                put(s, "t", {"a": 2}, parent=first)
                put(s, "t*", {"a": 3})
                put(s, "u", {"a": 4})
            before_other = [t.checkpoint for t in other.list(None)]
            before_tricky = [t.checkpoint for t in tricky.list(None)]

            saver.prune(["t"], strategy="keep_latest")
            assert len(list(saver.list(cfg("t")))) == 1
            saver.delete_thread("t")
            saver.prune(["t*"], strategy="delete")
            saver.delete_for_runs(["*"])

            assert [t.config["configurable"]["thread_id"] for t in saver.list(None)] == ["u"]
            assert [t.checkpoint for t in other.list(None)] == before_other
            assert [t.checkpoint for t in tricky.list(None)] == before_tricky
        for key in planted:
            assert client.exists(key), f"{key} was deleted"
    finally:
        client.delete(*planted)  # the neighbours' keys go with the test's prefix


def test_a_newer_layout_is_refused_and_left_alone(url: str, client: redis.Redis) -> None:
    client.set(f"{prefix_of(url)}:layout", "99")
    with pytest.raises(SchemaVersionError, match="layout version 99"):
        open_checkpointer(url)
    assert client.get(f"{prefix_of(url)}:layout") == b"99"


def test_an_unreadable_layout_key_is_a_clear_error_and_left_alone(
    url: str, client: redis.Redis
) -> None:
    client.set(f"{prefix_of(url)}:layout", "garbage")
    with pytest.raises(SchemaVersionError, match=r"layout.*'garbage'.*another prefix"):
        open_checkpointer(url)
    assert client.get(f"{prefix_of(url)}:layout") == b"garbage"


# -- bounded work ------------------------------------------------------------------------


def _commands(server: Server) -> dict[str, int]:
    """Calls per command since the last reset, scripts' own calls included."""
    stats = redis.Redis(port=server.port).info("commandstats")
    ignored = {"config|resetstat", "info", "hello", "client|setinfo"}
    calls = {name.removeprefix("cmdstat_"): s["calls"] for name, s in stats.items()}
    return {name: n for name, n in calls.items() if name not in ignored}


def test_latest_and_list_limit_do_the_same_work_whatever_the_thread_size(
    private: Server,
) -> None:
    admin = redis.Redis(port=private.port)
    with open_checkpointer(f"redis://127.0.0.1:{private.port}/0") as saver:
        for thread_id, size in (("short", 40), ("long", 400)):
            parent = None
            for step in range(size):  # the last 20 have values too large to pass through Lua
                big = random.Random(step).randbytes(100_000) if step >= size - 20 else 0
                parent = put(saver, thread_id, {"a": step, "big": big}, parent, step=step)
        saver.get_tuple(cfg("short"))  # the server learns the scripts
        used = {}
        for thread_id, size in (("short", 40), ("long", 400)):
            admin.config_resetstat()
            assert saver.get_tuple(cfg(thread_id)).metadata["step"] == size - 1
            listed = [t.metadata["step"] for t in saver.list(cfg(thread_id), limit=10)]
            assert listed == list(range(size - 1, size - 11, -1))
            used[thread_id] = _commands(private)
        assert used["short"] == used["long"]  # O(log n + limit): no step depends on n
        assert used["long"]["evalsha"] == 2  # one script call each...
        assert used["long"]["hmget"] == 2  # ...and one HMGET for the values over 64 KiB
        whole = {"scan", "keys", "hgetall", "hkeys", "hvals", "hscan", "zscan", "smembers"}
        assert not whole & set(used["long"]), used["long"]

        admin.config_resetstat()
        assert len(list(saver.list(None, limit=3))) == 3
        used_globally = _commands(private)
        assert not whole & set(used_globally), used_globally  # no scan of anything
        assert not any(name.startswith(("ft.", "json.")) for name in used_globally)


def test_the_global_listing_does_the_same_work_whatever_the_number_of_threads(
    private: Server,
) -> None:
    """list(None, limit=k) reads a page of the checkpoint index and the page's threads:
    the same commands with 3 threads as with 300, filtered on an indexed key or not."""
    admin = redis.Redis(port=private.port)
    url = f"redis://127.0.0.1:{private.port}/0"
    with open_checkpointer(url, index_metadata=["user"]) as saver:
        used: list[dict[str, int]] = []
        for threads in (3, 300):
            for t in range(threads):
                put(saver, f"old-{threads}-{t}", {"a": t}, user="someone")
            parent = None
            for step in range(4):  # the newest checkpoints: two users in one thread
                parent = put(saver, "new", {"a": step}, parent, step=step, user=f"u{step % 2}")
            user = {"user": "u1"}
            for _ in range(2):  # the first time, the server learns the scripts
                admin.config_resetstat()
                assert [t.metadata["step"] for t in saver.list(None, limit=3)] == [3, 2, 1]
                assert [t.metadata["step"] for t in saver.list(None, filter=user, limit=2)] == [
                    3,
                    1,
                ]
            used.append(_commands(private))
            saver.delete_thread("new")
        assert used[0] == used[1]
        assert "zscan" not in used[1]
        assert "scan" not in used[1]


def test_large_threads_are_copied_pruned_and_deleted_in_bounded_batches(url: str) -> None:
    prefix = prefix_of(url)
    admin = client_for(REDIS.prefixes[prefix])
    with open_checkpointer(url) as saver:
        parent = None
        for step in range(1_100):  # more than every page and batch size
            parent = put(saver, "big", {"a": step}, parent, step=step, run_id=f"r{step % 3}")
            if step % 100 == 0:
                saver.put_writes(parent, [("a", step)], f"task-{step}")
        saver.copy_thread("big", "copy")
        copied = [t.metadata["step"] for t in saver.list(cfg("copy"))]
        assert copied == list(range(1_099, -1, -1))
        saver.delete_for_runs(["r1"])
        survivors = [step for step in range(1_100) if step % 3 != 1]
        assert [t.metadata["step"] for t in saver.list(cfg("big"))] == survivors[::-1]
        saver.prune(["big"], strategy="keep_latest")
        assert [t.metadata["step"] for t in saver.list(cfg("big"))] == [1_098]
        saver.delete_thread("copy")
        saver.delete_thread("big")
    counter = f"{prefix}:{{{prefix}:threads}}:count".encode()
    assert keys_of(admin, prefix) == {f"{prefix}:layout".encode(), counter}  # no registry
    assert admin.get(counter) == b"0"  # which counts no thread


def test_a_copy_appears_all_at_once(url: str) -> None:
    with open_checkpointer(url) as saver:
        parent = None
        for step in range(600):
            parent = put(saver, "src", {"a": step}, parent, step=step)
        seen: set[int] = set()
        stop = threading.Event()

        def watch() -> None:
            while not stop.is_set():
                seen.add(len(list(saver.list(cfg("dst"), limit=1_000))))

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            saver.copy_thread("src", "dst")
            time.sleep(0.05)
        finally:
            stop.set()
            watcher.join()
        assert seen <= {0, 600}
        assert 600 in seen


def _interrupt_copy_before(
    monkeypatch: pytest.MonkeyPatch, name: bytes, action: Any, times: int
) -> list[int]:
    """Make ``copy_thread`` call ``action()`` right before it copies the source key ending
    in ``name``, the first ``times`` times; returns how often it was called."""
    from statekeeper.backends.redis._writes import Plans

    stage = Plans._stage
    calls: list[int] = []

    def interrupted(key: bytes, into: bytes, zset: bool, *rest: Any) -> Any:
        if key.endswith(b":" + name) and len(calls) < times:
            calls.append(1)
            action()
        return stage(key, into, zset, *rest)

    monkeypatch.setattr(Plans, "_stage", staticmethod(interrupted))
    return calls


def test_a_copy_is_a_snapshot_of_the_source_even_if_it_is_pruned_meanwhile(
    url: str, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    with open_checkpointer(url) as saver:
        parent = None
        for step in range(5):
            parent = put(saver, "src", {"a": f"value {step}", "b": [step]}, parent, step=step)
        # the records are staged already, their values not yet: prune the source then
        calls = _interrupt_copy_before(
            monkeypatch, b"refs", lambda: saver.prune(["src"], strategy="keep_latest"), 1
        )
        saver.copy_thread("src", "dst")
        assert calls == [1]
        copied = list(saver.list(cfg("dst")))
        assert [t.metadata["step"] for t in copied] == [4]  # the source as it is now
        assert copied[0].checkpoint["channel_values"] == {"a": "value 4", "b": [4]}
        source = [(t.metadata, t.checkpoint["channel_values"]) for t in saver.list(cfg("src"))]
        assert [(t.metadata, t.checkpoint["channel_values"]) for t in copied] == source
        for thread_id in ("src", "dst"):
            ids, ns, cp, refs = (
                thread_key(saver, thread_id, k) for k in ("ids", "ns", "cp", "refs")
            )
            records = client.hgetall(cp)
            assert (
                set(client.zrange(ns, 0, -1))
                == set(records)
                == {swap(m) for m in client.zrange(ids, 0, -1)}
            )
            counts: dict[bytes, int] = {}
            for ref, data in records.items():
                for field in Record.parse(data, ref).fields:
                    counts[field] = counts.get(field, 0) + 1
            stored = client.hgetall(refs)
            assert {
                k: int(v)
                for k, v in stored.items()
                if not k.startswith((b"\xfd", b"\xfe", b"\xff"))
            } == counts
        assert not [k for k in keys_of(client, prefix_of(url)) if b":copy:" in k]


def test_a_copy_of_a_source_that_keeps_changing_fails_cleanly(
    url: str, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    with open_checkpointer(url) as saver:
        put(saver, "src", {"a": 0}, step=0)
        steps = iter(range(1, 100))

        def write() -> None:
            step = next(steps)
            put(saver, "src", {"a": step}, saver.get_tuple(cfg("src")).config, step=step)

        calls = _interrupt_copy_before(monkeypatch, b"blobs", write, 100)
        with pytest.raises(StorageError, match="kept changing"):
            saver.copy_thread("src", "dst")
        assert len(calls) > 1  # retried
        assert saver.get_tuple(cfg("dst")) is None
        assert not [k for k in keys_of(client, prefix_of(url)) if b"{dst}" in k]
        monkeypatch.undo()
        saver.copy_thread("src", "dst")  # once the source holds still, it copies
        assert len(list(saver.list(cfg("dst")))) == len(calls) + 1


def test_threads_without_a_change_stamp_are_still_copied_and_get_one_on_write(
    url: str, cluster_url: str, client: redis.Redis
) -> None:
    with open_checkpointer(url) as saver:
        first = put(saver, "old", {"a": 1}, step=0)
        refs = thread_key(saver, "old", "refs")
        stamp = client.hget(refs, b"\xff")
        assert stamp is not None
        assert stamp.endswith(b":1")
        client.hdel(refs, b"\xff")  # as written before stamps existed
        saver.copy_thread("old", "new")
        assert saver.get_tuple(cfg("new")).checkpoint["channel_values"] == {"a": 1}
        assert client.hget(thread_key(saver, "new", "refs"), b"\xff") is not None  # a new one
        put(saver, "old", {"a": 2}, parent=first, step=1)
        assert client.hget(refs, b"\xff").endswith(b":1")  # type: ignore[union-attr]
        saver.delete_thread("old")
        put(saver, "old", {"a": 3}, step=2)
        assert client.hget(refs, b"\xff") != stamp  # a thread written anew: a new epoch
    with open_checkpointer(cluster_url) as saver:
        put(saver, "src", {"a": 1}, step=0)
        saver.copy_thread("src", "dst")
        assert saver.get_tuple(cfg("dst")).checkpoint["channel_values"] == {"a": 1}


# -- TTL ---------------------------------------------------------------------------------


def _deadlines(client: redis.Redis, saver: Any, thread_id: str) -> set[int]:
    """When each existing key of the thread expires (ms; -1: never)."""
    found = set()
    for key in (thread_key(saver, thread_id, name) for name in THREAD_KEYS):
        if client.exists(key):
            try:
                found.add(client.execute_command("PEXPIRETIME", key))
            except redis.ResponseError:  # Redis 6.2: close enough, to 50 ms
                ttl = client.pttl(key)
                at = -1 if ttl < 0 else int(time.time() * 1000 + ttl)
                found.add(next((d for d in found if d >= 0 and abs(d - at) <= 50), at))
    return found


def test_ttl_expires_all_keys_of_a_thread_together_and_writes_refresh_it(
    url: str, client: redis.Redis
) -> None:
    with open_checkpointer(url, ttl=60) as saver:
        stored = put(saver, "t", {"a": "x" * 2000})
        first = _deadlines(client, saver, "t")
        assert len(first) == 1  # one deadline for every key
        assert 0 < next(iter(first)) / 1000 - time.time() <= 60
        time.sleep(0.06)  # more than the 50 ms a deadline is rounded to on Redis 6.2
        saver.put_writes(stored, [("a", 1)], "task")
        second = _deadlines(client, saver, "t")
        assert len(second) == 1
        assert second != first
        saver.get_tuple(cfg("t"))  # reads do not refresh without refresh_on_read
        assert _deadlines(client, saver, "t") == second
    with open_checkpointer(url, ttl=60, refresh_on_read=True) as saver:
        time.sleep(0.06)
        saver.get_tuple(cfg("t"))
        third = _deadlines(client, saver, "t")
        assert len(third) == 1
        assert third != second
    with open_checkpointer(url) as saver:  # a saver without a ttl makes the thread permanent
        put(saver, "t", {"a": 2})
        assert _deadlines(client, saver, "t") == {-1}


def test_expired_threads_disappear_everywhere(url: str, client: redis.Redis) -> None:
    with open_checkpointer(url, ttl=0.4) as saver:
        put(saver, "short", {"a": 1})
        saver.copy_thread("short", "copied")
        assert len(_deadlines(client, saver, "copied")) == 1
    with open_checkpointer(url) as saver:
        put(saver, "forever", {"a": 1})
        time.sleep(0.6)
        assert saver.get_tuple(cfg("short")) is None
        assert [t.config["configurable"]["thread_id"] for t in saver.list(None)] == ["forever"]
        assert client.zrange(f"{prefix_of(url)}:threads", 0, -1) == [b"forever"]  # swept


# -- listing scopes ----------------------------------------------------------------------

LIST_IDS = [f"1ef00000-0000-6000-8000-{i:012d}" for i in range(1, 13)]


def _listing_history(saver: Any) -> None:
    """Checkpoints in two threads and two namespaces each; one id in both namespaces."""
    for i, checkpoint_id in enumerate(LIST_IDS):
        places = [("ab"[i % 2], "" if i % 3 else "sub")]
        if i == 3:
            places.append(("b", ""))  # the same id in the other namespace of thread b
        for thread_id, ns in places:
            checkpoint = empty_checkpoint()
            checkpoint["id"] = checkpoint_id
            checkpoint["channel_values"] = {"v": i}
            checkpoint["channel_versions"] = {"v": f"{i + 1:032}.0"}
            metadata = {"source": "loop", "step": i, "parity": i % 2, "ns": ns}
            saver.put(cfg(thread_id, ns), checkpoint, metadata, {"v": f"{i + 1:032}.0"})


def _no_ns(thread_id: str, checkpoint_id: str | None = None) -> dict[str, Any]:
    """A config without ``checkpoint_ns``: every namespace of the thread."""
    configurable = {"thread_id": thread_id}
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def _before(i: int, thread_id: str = "b") -> dict[str, Any]:
    return {"before": cfg(thread_id, "", LIST_IDS[i])}


ONE, ANY_NS = cfg("b", "", LIST_IDS[3]), _no_ns("b", LIST_IDS[3])  # one id, two namespaces
B3, B3_SUB = ("b", "", 3), ("b", "sub", 3)
ALL = [
    *[("b", "", 11), ("a", "", 10), ("b", "sub", 9), ("a", "", 8), ("b", "", 7)],
    *[("a", "sub", 6), ("b", "", 5), ("a", "", 4), B3_SUB, B3, ("a", "", 2), ("b", "", 1)],
    ("a", "sub", 0),
]
LISTINGS = [  # config, options, what is listed: (thread, namespace, step) newest first
    pytest.param(None, {}, ALL, id="all"),
    pytest.param(None, {"limit": 3}, ALL[:3], id="all-limit"),
    pytest.param(None, _before(7, "a"), ALL[5:], id="all-before"),
    pytest.param(None, {"filter": {"parity": 0}, "limit": 2}, ALL[1:4:2], id="all-filter"),
    pytest.param(_no_ns("b"), {}, [t for t in ALL if t[0] == "b"], id="thread"),
    pytest.param(_no_ns("b"), {"limit": 2, **_before(10)}, ALL[2:5:2], id="thread-page"),
    pytest.param(_no_ns("b"), {"filter": {"ns": "sub"}}, [ALL[2], B3_SUB], id="thread-filter"),
    pytest.param(cfg("b", ""), {}, [t for t in ALL if t[:2] == ("b", "")], id="namespace"),
    pytest.param(cfg("b", "sub"), _before(9), [B3_SUB], id="namespace-before"),
    pytest.param(cfg("b", ""), {"limit": 1, "filter": {"parity": 1}}, ALL[:1], id="ns-filter"),
    pytest.param(ONE, {}, [B3], id="one"),
    pytest.param(ONE, {"filter": {"step": 3}}, [B3], id="one-matching"),
    pytest.param(ONE, {"filter": {"step": 4}}, [], id="one-not-matching"),
    pytest.param(ONE, _before(3), [], id="one-not-before"),
    pytest.param(ONE, _before(4, "x"), [B3], id="one-before"),
    pytest.param(ANY_NS, {}, [B3_SUB, B3], id="one-id-any-namespace"),
    pytest.param(ANY_NS, {"limit": 1}, [B3_SUB], id="one-id-limit"),
    pytest.param(ANY_NS, _before(2), [], id="one-id-not-before"),
    pytest.param(cfg("b", "", LIST_IDS[0]), {}, [], id="one-elsewhere"),
    pytest.param(_no_ns("b"), {"limit": 0}, [], id="limit-zero"),
]


@pytest.mark.parametrize(("config", "options", "expected"), LISTINGS)
def test_every_listing_scope_lists_what_sqlite_lists(
    url: str, config: dict[str, Any] | None, options: dict[str, Any], expected: list[tuple]
) -> None:
    with open_checkpointer(url) as saver, open_checkpointer("memory://") as reference:
        for each in (saver, reference):
            _listing_history(each)
        listed = list(saver.list(config, **options))
        assert [t.config for t in listed] == [t.config for t in reference.list(config, **options)]
        assert [
            (t.config["configurable"]["thread_id"], t.metadata["ns"], t.metadata["step"])
            for t in listed
        ] == expected
        for t in listed:
            assert t.checkpoint["channel_values"] == {"v": t.metadata["step"]}


# -- pending writes and claims ---------------------------------------------------------------


def test_get_writes_has_get_tuples_order_and_the_task_paths(url: str) -> None:
    with open_checkpointer(url) as saver:
        stored = put(saver, "t", {"a": 1})
        saver.put_writes(stored, [("b", "late"), ("c", {"x": 1})], "task-2", "~__pregel_pull, b")
        saver.put_writes(stored, [("a", 2), ("__error__", "boom")], "task-1", "~__pregel_pull, a")
        saver.put_writes(stored, [("a", 3)], "task-0", "~__pregel_push, 0")
        writes = saver.get_writes(stored)
        assert [(w.task_id, w.channel, w.value) for w in writes] == saver.get_tuple(
            stored
        ).pending_writes
        assert {(w.task_id, w.task_path) for w in writes} == {
            ("task-0", "~__pregel_push, 0"),
            ("task-1", "~__pregel_pull, a"),
            ("task-2", "~__pregel_pull, b"),
        }
        assert writes[0].task_path == "~__pregel_pull, a"  # writes_sort_key: by path first
        assert (
            saver.get_writes(cfg("t", checkpoint_id="1ef00000-0000-6000-8000-000000000000")) == []
        )
        assert (
            saver.get_writes(cfg("nobody", checkpoint_id=stored["configurable"]["checkpoint_id"]))
            == []
        )
        with pytest.raises(ConfigurationError, match="checkpoint_id"):
            saver.get_writes(cfg("t"))


def _claim_value(client: Any, saver: Any, thread_id: str) -> dict[str, Any] | None:
    raw = client.get(thread_key(saver, thread_id, "claim"))
    return None if raw is None else json.loads(raw)


def check_claims_conflict_and_release(a: Any, b: Any, client: Any) -> None:
    with a.claim_thread("t"):
        with pytest.raises(ThreadBusyError) as info, b.claim_thread("t"):
            pytest.fail("a second claim of a held thread was granted")
        assert info.value.thread_id == "t"
        assert info.value.holder["pid"] == os.getpid()
        assert {"pid", "host", "since"} <= set(info.value.holder)
        assert "token" not in info.value.holder
        assert f"pid {os.getpid()}" in str(info.value)
        with pytest.raises(ThreadBusyError), a.claim_thread("t"):  # the same saver, too
            pass
        with b.claim_thread("u"), b.claim_thread("线程 {x}"):  # other threads are free
            assert _claim_value(client, b, "u") is not None
        assert _claim_value(client, b, "u") is None  # released on exit
        assert _claim_value(client, a, "t")["thread_id"] == "t"
    assert _claim_value(client, a, "t") is None
    with pytest.raises(RuntimeError, match="inside"), b.claim_thread("t"):
        raise RuntimeError("inside")
    with a.claim_thread("t"):  # released after an exception too
        pass


def test_claims_conflict_between_savers_and_are_released_on_exit(
    url: str, client: redis.Redis
) -> None:
    with open_checkpointer(url) as a, open_checkpointer(url) as b:
        check_claims_conflict_and_release(a, b, client)
        key = thread_key(a, "t", "claim")
        assert key == f"{prefix_of(url)}:{{t}}:claim".encode()
        assert redis.cluster.key_slot(key) == redis.cluster.key_slot(thread_key(a, "t", "ids"))
        with a.claim_thread("t"):
            assert 29_000 < client.pttl(key) <= 30_000  # the default claim_ttl: 30 s
            a.delete_thread("t")  # deleting the thread leaves the claim alone
            assert client.exists(key)


CLAIMER = """
import sys, time
sys.path.insert(0, {root!r})
from statekeeper.checkpointers import open_checkpointer
saver = open_checkpointer({url!r}, claim_ttl=1)
with saver.claim_thread("t"):
    print("claimed", flush=True)
    time.sleep(60)
"""


@pytest.mark.slow
def test_a_killed_holders_claim_expires_after_the_ttl(url: str) -> None:
    code = CLAIMER.format(root=str(ROOT), url=url)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "claimed"
        time.sleep(1.2)  # beyond the ttl: the holder's renewals kept it
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        killed = time.monotonic()
        with open_checkpointer(url) as saver:
            with pytest.raises(ThreadBusyError) as info, saver.claim_thread("t"):
                pass
            assert info.value.holder["pid"] == proc.pid
            while True:
                try:
                    with saver.claim_thread("t"):
                        break
                except ThreadBusyError:
                    assert time.monotonic() - killed < 5
                    time.sleep(0.05)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def check_renewal_and_loss(a: Any, b: Any, client: Any, caplog: pytest.LogCaptureFixture) -> None:
    with a.claim_thread("t"):
        time.sleep(1.0)  # more than three times the ttl
        with pytest.raises(ThreadBusyError), b.claim_thread("t"):
            pass
        claim = thread_key(a, "t", "claim")
        assert 0 < client.pttl(claim) <= 300
        assert not [r for r in caplog.records if r.levelname == "WARNING"]
        # the claim expires (as if this process had been cut off) and another run takes it
        client.delete(claim)
        other = json.dumps({"pid": 1, "host": "elsewhere", "since": "then", "token": "x"})
        client.set(claim, other, px=5000)
        time.sleep(0.4)
    assert client.get(claim) == other.encode()  # the release left it alone
    (record,) = [r for r in caplog.records if r.levelname == "WARNING"]
    assert record.name == "statekeeper.backends.redis.checkpointer"
    assert "lost the claim on thread 't'" in record.getMessage()
    assert "elsewhere" in record.getMessage()
    assert "'x'" not in record.getMessage()


def test_a_held_claim_is_renewed_and_a_lost_one_is_logged(
    url: str, client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    with open_checkpointer(url, claim_ttl=0.3) as a, open_checkpointer(url) as b:
        check_renewal_and_loss(a, b, client, caplog)


def test_claims_on_a_cluster(cluster_url: str, caplog: pytest.LogCaptureFixture) -> None:
    admin = client_for(REDIS.prefixes[prefix_of(cluster_url)])
    try:
        with open_checkpointer(cluster_url) as a, open_checkpointer(cluster_url) as b:
            check_claims_conflict_and_release(a, b, admin)
        with (
            open_checkpointer(cluster_url, claim_ttl=0.3) as a,
            open_checkpointer(cluster_url) as b,
        ):
            check_renewal_and_loss(a, b, admin, caplog)
            nodes = set()
            for tid in "abcdefgh":
                with a.claim_thread(tid):
                    nodes.add(admin.get_node_from_key(thread_key(a, tid, "claim")).port)
            assert len(nodes) > 1  # the claims are spread over the nodes
    finally:
        admin.close()


# -- faults ------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_dropped_connection_is_retried_and_a_dead_server_is_a_storage_error(
    private: Server,
) -> None:
    saver = open_checkpointer(f"redis://127.0.0.1:{private.port}/0?retries=6")
    try:
        put(saver, "t", {"a": 1})
        private.kill()
        restarter = threading.Timer(0.3, lambda: private.start(wait=False))
        restarter.start()
        stored = put(saver, "t", {"a": 2})  # retried with backoff until the server is back
        restarter.join()
        assert saver.get_tuple(stored).checkpoint["channel_values"] == {"a": 2}

        private.kill()
        started = time.monotonic()
        with pytest.raises(StorageError, match=f"127.0.0.1:{private.port}"):
            saver.get_tuple(cfg("t"))
        assert time.monotonic() - started < 15
    finally:
        saver.close()
        private.start()


def test_the_async_api_retries_too(private: Server) -> None:
    async def main() -> None:
        saver = open_checkpointer(f"redis://127.0.0.1:{private.port}/0?retries=6")
        async with saver:
            first = empty_checkpoint()
            await saver.aput(cfg("t"), first, {}, {})
            private.kill()
            threading.Timer(0.3, lambda: private.start(wait=False)).start()
            assert (await saver.aget_tuple(cfg("t"))) is None  # a new, empty server
            await saver.aput(cfg("t"), empty_checkpoint(), {}, {})
            assert (await saver.aget_tuple(cfg("t"))) is not None

    asyncio.run(main())


WRITER = """
import sys, random
sys.path.insert(0, {root!r})
from tests.backends.test_redis import put, cfg, expected_values
from statekeeper.checkpointers import open_checkpointer
saver = open_checkpointer({url!r})
start = int(sys.argv[1])
parent = saver.get_tuple(cfg("w"))
parent = parent.config if parent else None
print("ready", flush=True)
for step in range(start, start + 10_000):
    parent = put(saver, "w", expected_values(step), parent, step=step)
    saver.put_writes(parent, [("w", step), ("__error__", "e")], "task")
"""


def expected_values(step: int) -> dict[str, Any]:
    """Large values, a list that grows (stored as deltas), and a small one."""
    rng = random.Random(step)
    return {
        "big": rng.randbytes(300_000),
        "log": [f"entry {i}" for i in range(step + 1)],
        "step": step,
    }


def check_consistent(client: redis.Redis, saver: Any, thread_id: str) -> int:
    """Every listed checkpoint loads completely, the indexes agree, and every stored value
    is referenced exactly as often as records and deltas reference it."""
    from statekeeper.backends.redis._integrity.records import Record as _Record

    ids, ns, cp, blobs, refs = (
        thread_key(saver, thread_id, name) for name in ("ids", "ns", "cp", "blobs", "refs")
    )
    records = client.hgetall(cp)
    assert set(client.zrange(ns, 0, -1)) == set(records)
    assert client.zcard(ids) == len(records)
    counts: dict[bytes, int] = {}
    for ref, data in records.items():
        for field in _Record.parse(data, ref).fields:
            counts[field] = counts.get(field, 0) + 1
    stored = client.hgetall(refs)
    for key, value in stored.items():
        if key.startswith(b"\xfe"):
            counts[value] = counts.get(value, 0) + 1
    skip = (b"\xfd", b"\xfe", b"\xff")
    assert {k: int(v) for k, v in stored.items() if not k.startswith(skip)} == counts
    assert set(client.hkeys(blobs)) <= set(counts)
    for tup in saver.list(cfg(thread_id)):
        step = tup.metadata["step"]
        assert tup.checkpoint["channel_values"] == expected_values(step), step
    return len(records)


@pytest.mark.slow
def test_a_writer_killed_mid_put_leaves_only_complete_checkpoints(url: str, client: Any) -> None:
    code = WRITER.format(root=str(ROOT), url=url)
    rng = random.Random(7)
    step = 0
    with open_checkpointer(url) as saver:
        for _ in range(3):
            proc = subprocess.Popen(
                [sys.executable, "-c", code, str(step)], stdout=subprocess.PIPE, text=True
            )
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready"
            time.sleep(rng.uniform(0.2, 0.6))
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            proc.stdout.close()
            latest = saver.get_tuple(cfg("w"))
            step = latest.metadata["step"] + 1 if latest else 0
            check_consistent(client, saver, "w")
        assert step > 3


def _child_puts(saver: Any) -> None:
    put(saver, "child", {"a": "from the child"})
    assert saver.get_tuple(cfg("parent")) is not None


def test_a_forked_child_uses_connections_of_its_own(url: str) -> None:
    import multiprocessing

    with open_checkpointer(url) as saver:
        put(saver, "parent", {"a": 1})  # the parent has connections now
        child = multiprocessing.get_context("fork").Process(target=_child_puts, args=(saver,))
        child.start()
        for step in range(50):  # the parent keeps talking on its own connections meanwhile
            put(saver, "parent", {"a": step})
        child.join(30)
        assert child.exitcode == 0
        assert saver.get_tuple(cfg("child")).checkpoint["channel_values"] == {"a": "from the child"}
        assert saver.get_tuple(cfg("parent")).checkpoint["channel_values"] == {"a": 49}


# -- Cluster -----------------------------------------------------------------------------


def test_cluster_keeps_each_thread_in_one_slot_and_the_registry_in_its_own(
    cluster_url: str,
) -> None:
    prefix = prefix_of(cluster_url)
    admin = client_for(REDIS.prefixes[prefix])
    with open_checkpointer(cluster_url) as saver:
        for tid in ("a", "b", "c", "d", "e", "f:{g}"):
            stored = put(saver, tid, {"v": tid}, run_id="r")
            saver.put_writes(stored, [("v", 1)], "task")
        slots: dict[str, set[int]] = {}
        for key in keys_of(admin, prefix):
            text = key.decode()
            tag = text[text.index("{") + 1 : text.index("}")] if "{" in text else text
            slots.setdefault(tag, set()).add(admin.keyslot(key))
        assert all(len(s) == 1 for s in slots.values()), slots
        nodes = {admin.get_node_from_key(k).port for k in keys_of(admin, prefix)}
        assert len(nodes) > 1  # the threads really are spread over the nodes
        assert len(list(saver.list(None))) == 6
        saver.delete_for_runs(["r"])
        assert list(saver.list(None)) == []


def test_a_cluster_node_opened_as_a_plain_server_gets_a_hint(cluster_url: str) -> None:
    node = cluster_url.split("?")[0].replace("redis+cluster", "redis")

    def write_everywhere() -> None:
        with open_checkpointer(f"{node}/0?prefix={prefix_of(cluster_url)}") as saver:
            for tid in "abcdefgh":  # some slot is on another node
                put(saver, tid, {"a": 1})

    with pytest.raises(StorageError, match=r"open it with redis\+cluster://"):
        write_everywhere()


# -- serde and the async path --------------------------------------------------------------


def test_encrypted_serde_leaves_no_plaintext_in_redis(url: str, client: redis.Redis) -> None:
    serde = EncryptedSerializer.from_pycryptodome_aes(key=b"K" * 32)
    with open_checkpointer(url, serde=serde) as saver:
        stored = put(saver, "t", {"note": "PLAINTEXT-CANARY" * 100, "log": ["PLAINTEXT-CANARY"]})
        saver.put_writes(stored, [("note", "PLAINTEXT-CANARY")], "task")
        stored_bytes = b""
        for key in keys_of(client, prefix_of(url)):
            kind = client.type(key)
            if kind == b"hash":
                stored_bytes += b"".join(a + b for a, b in client.hgetall(key).items())
            elif kind == b"zset":
                stored_bytes += b"".join(client.zrange(key, 0, -1))
            else:
                stored_bytes += client.get(key) or b""
        assert b"PLAINTEXT-CANARY" not in stored_bytes
        assert b"PLAINTEXT-CANARY".hex().encode() not in stored_bytes
        assert saver.get_tuple(stored).checkpoint["channel_values"]["log"] == ["PLAINTEXT-CANARY"]


def test_pickled_payloads_are_refused(url: str, client: redis.Redis) -> None:
    import pickle

    from statekeeper.backends.redis._client import pack

    with open_checkpointer(url) as saver:
        stored = put(saver, "t", {"a": "x"})
        blobs = thread_key(saver, "t", "blobs")
        (field,) = client.hkeys(blobs)
        client.hset(blobs, field, pack(b"pickle", b"", b"", b"") + pickle.dumps("x"))
        with pytest.raises(SerializationError, match="'pickle' payload"):
            saver.get_tuple(stored)


def test_the_async_api_on_the_asyncio_client_does_not_use_worker_threads(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the async API must not hop to a worker thread")

    monkeypatch.setattr(asyncio, "to_thread", refuse)

    async def main() -> None:
        async with open_checkpointer(url, async_io="asyncio") as saver:
            stored = await saver.aput(cfg("t"), empty_checkpoint(), {}, {})
            await saver.aput_writes(stored, [("a", 1)], "task")
            assert (await saver.aget_tuple(cfg("t"))) is not None
            assert len([t async for t in saver.alist(None)]) == 1
            await saver.acopy_thread("t", "u")
            await saver.aprune(["u"])
            await saver.adelete_for_runs(["r"])
            await saver.adelete_thread("u")

    asyncio.run(main())
    asyncio.run(main_again(url))  # a second event loop gets its own connections


async def main_again(url: str) -> None:
    async with open_checkpointer(url, async_io="asyncio") as saver:
        assert (await saver.aget_tuple(cfg("t"))) is not None


CONCURRENT = 3 * ASYNC_CONNECTIONS + 20  # calls at once: well past one client's connections


@pytest.mark.parametrize("async_io", ["asyncio", "threads"])
@pytest.mark.parametrize("deployment", ["standalone", "cluster"])
def test_hundreds_of_concurrent_async_calls_wait_for_a_connection_and_all_succeed(
    deployment: str, async_io: str
) -> None:
    # redis-py's asyncio pools raise "Too many connections" past their size; a busy event
    # loop (an ainvoke fleet) gets there, and every call must wait for a connection instead
    made = REDIS.url(deployment)

    async def one(saver: Any, n: int) -> tuple[Any, Any]:
        stored = await saver.aput(cfg(f"c{n}"), empty_checkpoint(), {"n": n}, {})
        await saver.aput_writes(stored, [("a", n)], "task")
        return stored, await saver.aget_tuple(cfg(f"c{n}"))

    async def main() -> None:
        async with open_checkpointer(made, async_io=async_io) as saver:
            done = await asyncio.gather(*(one(saver, n) for n in range(CONCURRENT)))
            for n, (stored, found) in enumerate(done):
                assert found is not None
                assert found.config == stored
                assert found.metadata["n"] == n
                assert found.pending_writes == [("task", "a", n)]
            listed = {t.metadata["n"] async for t in saver.alist(None)}
            assert listed == set(range(CONCURRENT))

    try:
        asyncio.run(main())
    finally:
        REDIS.cleanup(made)


# -- several processes ------------------------------------------------------------------

STEPS = 12


class Work(TypedDict):
    who: str
    n: int
    log: Annotated[list[str], operator.add]


def _step(state: Work) -> dict[str, Any]:
    time.sleep(0.04)
    return {"n": state["n"] + 1, "log": [f"{state['who']}:{state['n']}"]}


def build_work_graph(saver: Any) -> Any:
    builder = StateGraph(Work)
    builder.add_node("step", _step)
    builder.add_edge(START, "step")
    builder.add_conditional_edges("step", lambda s: "step" if s["n"] < STEPS else END)
    return builder.compile(checkpointer=saver)


def worker_main(url: str) -> None:
    """A worker process: runs ``run <thread>`` / ``resume <thread>`` lines from stdin."""
    with open_checkpointer(url) as saver:
        graph = build_work_graph(saver)
        print("ready", flush=True)
        for line in sys.stdin:
            command, thread_id = line.split()
            config = {"configurable": {"thread_id": thread_id}, "recursion_limit": 100}
            start = {"who": thread_id, "n": 0, "log": []} if command == "run" else None
            final = graph.invoke(start, config)
            print(json.dumps({"thread": thread_id, "final": final}), flush=True)


@pytest.mark.slow
def test_a_killed_workers_thread_is_resumed_by_another_process(url: str) -> None:
    threads = [f"w-{i}" for i in range(4)]
    expected = {
        t: build_work_graph(InMemorySaver()).invoke(
            {"who": t, "n": 0, "log": []}, {"configurable": {"thread_id": t}}
        )
        for t in threads
    }
    code = (
        "import sys\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from tests.backends.test_redis import worker_main\n"
        f"worker_main({url!r})\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        for _ in threads
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready"
        for proc, thread_id in zip(procs, threads, strict=True):
            assert proc.stdin is not None
            proc.stdin.write(f"run {thread_id}\n")
            proc.stdin.flush()
        with open_checkpointer(url) as watcher:
            deadline = time.monotonic() + 60
            while len(list(watcher.list(cfg("w-1")))) < 8:  # mid-run
                assert time.monotonic() < deadline
                time.sleep(0.01)
        procs[1].send_signal(signal.SIGKILL)
        procs[1].wait()
        finals = {}
        for index in (0, 2, 3):
            report = json.loads(procs[index].stdout.readline())  # type: ignore[union-attr]
            finals[report["thread"]] = report["final"]
        procs[0].stdin.write("resume w-1\n")  # type: ignore[union-attr]
        procs[0].stdin.flush()  # type: ignore[union-attr]
        report = json.loads(procs[0].stdout.readline())  # type: ignore[union-attr]
        finals[report["thread"]] = report["final"]
        assert finals == expected
        assert finals["w-1"]["log"] == [f"w-1:{i}" for i in range(STEPS)]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    stream.close()


# -- the checkpoint index and declared metadata indexes ---------------------------------------


@pytest.fixture(params=["standalone", "cluster"])
def any_url(request: pytest.FixtureRequest) -> Iterator[str]:
    made = REDIS.url(request.param)
    yield made
    REDIS.cleanup(made)


def admin_of(url: str) -> Any:
    """A plain client of the server (or Cluster) ``url`` names."""
    return client_for(REDIS.prefixes[prefix_of(url)])


def slot_key(url: str, name: str) -> str:
    """A key of the registry's slot: ``checkpoints``, ``meta:user:by-thread``..."""
    prefix = prefix_of(url)
    return f"{prefix}:{{{prefix}:threads}}:{name}"


def put_at(saver: Any, thread_id: str, ns: str = "", **metadata: Any) -> dict[str, Any]:
    """One checkpoint (a fresh uuid6 id, one small value) in a thread's namespace."""
    from langgraph.checkpoint.base.id import uuid6

    checkpoint = empty_checkpoint()
    checkpoint["id"] = str(uuid6())
    version = saver.get_next_version(None, None)
    checkpoint["channel_values"] = {"v": metadata.get("step", 0)}
    checkpoint["channel_versions"] = {"v": version}
    config = cfg(thread_id, ns)
    return saver.put(config, checkpoint, {"source": "loop", **metadata}, {"v": version})


def place(t: Any) -> tuple[str, str, str]:
    """(checkpoint id, thread id, namespace): what list(None) orders by, descending."""
    c = t.config["configurable"]
    return c["checkpoint_id"], c["thread_id"], c["checkpoint_ns"]


def scanned(saver: Any, threads: Any) -> list[Any]:
    """Every checkpoint of these threads, read thread by thread through each thread's own
    indexes (nothing across threads), in list(None)'s order."""
    found = [t for thread_id in threads for t in saver.list(_no_ns(thread_id))]
    return sorted(found, key=place, reverse=True)


def assert_lists_as_scanned(
    saver: Any, threads: Any, filters: tuple[dict[str, Any], ...] = ()
) -> None:
    """list(None) -- whole, limited, paged with before=, filtered -- and each thread's
    filtered listing equal a scan of the threads."""
    from statekeeper.checkpointers.semantics import matches

    expected = scanned(saver, threads)
    assert [place(t) for t in saver.list(None)] == [place(t) for t in expected]
    for limit in (1, 4):
        assert [place(t) for t in saver.list(None, limit=limit)] == [
            place(t) for t in expected[:limit]
        ]
    for below in {place(t)[0] for t in expected[1::3]}:
        before = cfg("any", "", below)
        older = [place(t) for t in expected if place(t)[0] < below]
        assert [place(t) for t in saver.list(None, before=before, limit=3)] == older[:3]
    for flt in filters:
        wanted = [place(t) for t in expected if matches(t.metadata, flt)]
        assert [place(t) for t in saver.list(None, filter=flt)] == wanted, flt
        assert [place(t) for t in saver.list(None, filter=flt, limit=2)] == wanted[:2], flt
        for thread_id in threads:
            mine = [p for p in wanted if p[1] == thread_id]
            assert [place(t) for t in saver.list(_no_ns(thread_id), filter=flt)] == mine
            root = [p for p in mine if p[2] == ""]
            assert [place(t) for t in saver.list(cfg(thread_id), filter=flt)] == root


def index_sizes(url: str, *names: str) -> list[int]:
    admin = admin_of(url)
    return [admin.zcard(slot_key(url, name)) for name in names]


INDEX_SETS = ("checkpoints", "checkpoints:by-thread", "meta:user", "meta:user:by-thread")
THREADS = ["a", "b:c", "线程 🚀", "nul\x00x", "{t}"]
FILTERS = ({"user": "u1"}, {"step": 2}, {"user": "u0", "step": 1}, {"user": "nobody"})


def _history(saver: Any, threads: list[str]) -> None:
    """Checkpoints in turns over the threads: namespaces, two runs, two users."""
    for step in range(4):
        for i, thread_id in enumerate(threads):
            ns = "sub" if step == 2 else ""
            put_at(saver, thread_id, ns, step=step, run_id=f"run-{step % 2}", user=f"u{i % 2}")


def test_the_global_listing_equals_a_scan_through_every_change(any_url: str) -> None:
    """list(None) and filtered listings read through the indexes give what reading every
    thread gives, after puts, delete_thread, prune, delete_for_runs, copy_thread and TTL
    expiry -- on a standalone server and on a Cluster -- and no entry is left behind."""
    with open_checkpointer(any_url, index_metadata=["user"]) as saver:
        threads = list(THREADS)
        _history(saver, threads)
        assert_lists_as_scanned(saver, threads, FILTERS)
        assert index_sizes(any_url, *INDEX_SETS) == [20] * 4

        saver.delete_thread("b:c")
        threads.remove("b:c")
        assert_lists_as_scanned(saver, threads, FILTERS)
        saver.prune(["a"])  # the newest of each namespace stay
        assert_lists_as_scanned(saver, threads, FILTERS)
        saver.delete_for_runs(["run-1"])
        assert_lists_as_scanned(saver, threads, FILTERS)
        saver.copy_thread("线程 🚀", "copy")  # the same checkpoint ids in two threads
        threads.append("copy")
        assert_lists_as_scanned(saver, threads, FILTERS)
        stored = len(scanned(saver, threads))
        assert index_sizes(any_url, *INDEX_SETS) == [stored] * 4

    with open_checkpointer(any_url, ttl=0.4) as short:  # no index_metadata: kept anyway
        for thread_id in ("brief-1", "brief-2"):
            put_at(short, thread_id, step=9, user="u1")
        assert_lists_as_scanned(short, [*threads, "brief-1", "brief-2"], FILTERS)
        assert index_sizes(any_url, *INDEX_SETS) == [stored + 2] * 4
    time.sleep(0.6)
    with open_checkpointer(any_url) as saver:
        assert_lists_as_scanned(saver, threads, FILTERS)  # the expired threads are gone
        assert index_sizes(any_url, *INDEX_SETS) == [stored] * 4  # swept, entries too
        assert saver.verify() == []


def test_a_declared_key_lists_exactly_what_the_filter_equality_matches(url: str) -> None:
    """Filters on declared keys read the key's index, which only pre-selects: every
    case of the shared filter contract gives what an undeclared saver (a scan) gives,
    across threads and within one; 1 and 1.0 share an entry, True does not."""
    import re

    from tests.checkpointers.test_contract import FILTER_CASES, FILTER_METADATA

    names = {k for md in FILTER_METADATA.values() for k in md}
    keys = sorted(k for k in names if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,63}", k))
    extra = [{"num": 1}, {"num": 1.0}, {"num": True}, {"num": "1"}, {"num": -0.0}, {"num": 0}]
    with (
        open_checkpointer(url, index_metadata=[*keys, "num"]) as indexed,
        open_checkpointer(url + ".scan") as plain,
    ):
        assert set(indexed._plans.declared.keys) == {*keys, "num"}
        for saver in (indexed, plain):
            for i, metadata in enumerate([*FILTER_METADATA.values(), *extra]):
                put_at(saver, f"t{i % 3}", "", step=i, **metadata)
        cases = [flt for _, flt, _ in FILTER_CASES]
        cases += [{"num": v} for v in (1, 1.0, True, "1", 0, 0.0, False, None, 2)]
        for flt in cases:
            for config in (None, _no_ns("t1"), cfg("t2")):
                got = [t.metadata["step"] for t in indexed.list(config, filter=flt)]
                want = [t.metadata["step"] for t in plain.list(config, filter=flt)]
                assert got == want, (flt, config)
                limited = [t.metadata["step"] for t in indexed.list(config, filter=flt, limit=1)]
                assert limited == want[:1]
        offset = len(FILTER_METADATA)
        one, true = (
            [t.metadata["step"] for t in indexed.list(None, filter={"num": v})] for v in (1, True)
        )
        assert one == [offset + 1, offset]  # 1 and 1.0 (one index entry's text: "1")
        assert true == [offset + 2]


def test_filters_on_keys_not_declared_still_scan(url: str) -> None:
    with open_checkpointer(url, index_metadata=["user"]) as saver:
        for i in range(6):
            put_at(saver, f"t{i % 2}", step=i, user=f"u{i % 3}", kind=f"k{i % 2}")
        assert [t.metadata["step"] for t in saver.list(None, filter={"kind": "k1"})] == [5, 3, 1]
        both = {"kind": "k0", "user": "u1"}
        assert [t.metadata["step"] for t in saver.list(None, filter=both)] == [4]
        assert [t.metadata["step"] for t in saver.list(cfg("t1"), filter={"kind": "k1"})] == [
            5,
            3,
            1,
        ]
        assert [t.metadata["step"] for t in saver.list(None, filter={"user": None})] == []


def test_a_key_declared_later_is_built_and_kept_by_every_writer(any_url: str) -> None:
    """A key declared on a prefix with checkpoints is built from them on a read-write
    open; a writer opened before the declaration has its put refused by the changed
    generation and planned again with the key; one opened later without the option keeps
    the index too; a build cut short is finished by the next read-write open, and is not
    read before."""
    with open_checkpointer(any_url) as early:
        for i in range(5):
            put_at(early, f"t{i}", step=i, user=f"u{i % 2}")
        assert index_sizes(any_url, "meta:user") == [0]
        with open_checkpointer(f"{any_url}&index_metadata=user,tenant") as declaring:
            assert declaring._plans.declared.keys == {"user": True, "tenant": True}
            assert index_sizes(any_url, "meta:user", "meta:user:by-thread") == [5, 5]
        put_at(early, "t9", step=9, user="u1")  # planned without the key: planned again
        assert index_sizes(any_url, "meta:user") == [6]
        assert early._plans.declared.keys == {"user": True, "tenant": True}
    with open_checkpointer(any_url) as later:  # no option: the prefix remembers
        put_at(later, "t8", step=8, user="u0", tenant="x")
        assert index_sizes(any_url, "meta:user", "meta:tenant") == [7, 1]
        assert [t.metadata["step"] for t in later.list(None, filter={"user": "u1"})] == [9, 3, 1]
        assert later.verify() == []
    admin = admin_of(any_url)
    admin.hset(slot_key(any_url, "indexed"), "user", "0")  # a build cut short by a crash
    admin.delete(slot_key(any_url, "meta:user"))
    with open_checkpointer(f"{any_url}&mode=ro") as reader:  # not built: not read (a scan)
        assert [t.metadata["step"] for t in reader.list(None, filter={"user": "u1"})] == [9, 3, 1]
        assert reader.verify() == []  # a key being built is not checked
    assert index_sizes(any_url, "meta:user") == [0]
    with open_checkpointer(any_url) as saver:  # read-write: built now
        assert admin.hget(slot_key(any_url, "indexed"), "user") == b"1"
        assert index_sizes(any_url, "meta:user") == [7]
        assert [t.metadata["step"] for t in saver.list(None, filter={"user": "u1"})] == [9, 3, 1]


@pytest.mark.parametrize(
    "keys",
    [["1user"], ["user", "bad-key"], ["a" * 65], ["with space"], [""], "user,x.y", [7]],
)
def test_bad_metadata_key_names_are_refused(url: str, keys: Any) -> None:
    with pytest.raises(ConfigurationError, match="index_metadata takes metadata keys"):
        open_checkpointer(url, index_metadata=keys)
    text = keys if isinstance(keys, str) else ",".join(map(str, keys))
    if text and text.isascii() and " " not in text:
        with pytest.raises(ConfigurationError, match="index_metadata takes metadata keys"):
            open_checkpointer(f"{url}&index_metadata={text}")
    with open_checkpointer(url) as saver:
        with pytest.raises(ConfigurationError, match="index_metadata takes metadata keys"):
            saver.index_metadata(*([keys] if isinstance(keys, str) else keys))
        saver.index_metadata("user")  # a good one, on an open saver
        assert saver._plans.declared.keys == {"user": True}
    with open_checkpointer(f"{url}&mode=ro&index_metadata=tenant") as reader:  # ignored
        assert reader._plans.declared.keys == {"user": True}
        with pytest.raises(ReadOnlyError):
            reader.index_metadata("tenant")


def test_a_copy_enters_the_index_before_it_appears_and_readers_keep_its_entries(
    any_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """copy_thread adds the target's entries, then publishes the copy; a read-write
    listing that meets those entries in between (their data not there yet) keeps them."""
    from statekeeper.backends.redis._writes import Plans

    with (
        open_checkpointer(any_url, index_metadata=["user"]) as saver,
        open_checkpointer(any_url) as reader,
    ):
        for step in range(3):
            put_at(saver, "src", step=step, user="u1")
        seen: list[list[Any]] = []
        original = Plans.add

        def add_then_read(self: Any, entries: Any, generation: Any) -> Any:
            done = yield from original(self, entries, generation)
            seen.append([place(t) for t in reader.list(None)])  # the copy is not there yet
            seen.append([place(t) for t in reader.list(None, filter={"user": "u1"})])
            return done

        monkeypatch.setattr(Plans, "add", add_then_read)
        saver.copy_thread("src", "dst")
        monkeypatch.undo()
        assert seen
        assert all({p[1] for p in listed} == {"src"} for listed in seen)
        assert_lists_as_scanned(saver, ["src", "dst"], ({"user": "u1"},))
        assert index_sizes(any_url, *INDEX_SETS) == [6] * 4
        assert saver.verify() == []


def test_forget_prefix_forgets_the_indexes_and_the_declared_keys(url: str) -> None:
    with open_checkpointer(url, index_metadata=["user"]) as saver:
        put_at(saver, "t", user="u")
        assert saver.forget_prefix() is False
        saver.delete_thread("t")
        admin_of(url).zadd(slot_key(url, "checkpoints"), {b"stale": 0})  # left by a crash
        assert saver.forget_prefix() is True
    assert keys_of(admin_of(url), prefix_of(url)) == set()
