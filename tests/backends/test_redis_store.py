"""The Redis memory store beyond the shared suite: every key inside the prefix and one
namespace's keys in one slot whatever its labels, the registry, faults and retries, and
no ``redis`` import without a Redis URL. Real servers only (``tests/redis_servers.py``)."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

import pytest

from statekeeper.errors import ConfigurationError, SchemaVersionError, StorageError
from statekeeper.memory.store import MemoryStore, open_store
from tests.redis_servers import REDIS, client_for

HOSTILE = ["a:b", "}{", "{x}", "*", "?[", " ", "\n", "100%", "ünï \U0001f600", "a/b\\c", "%7B"]
# <prefix>:store:{<tag>}:keys | item:<tag>, or the two keys of the prefix itself
_TAG = r"[A-Za-z0-9_.~%-]*"
_KEY = re.compile(rf"t-[0-9a-f]+:store:(version|namespaces|\{{{_TAG}\}}:(keys|item:{_TAG}))")


@pytest.fixture(params=["standalone", "cluster"])
def url(request: pytest.FixtureRequest) -> Iterator[str]:
    made = REDIS.url(request.param)
    yield made
    REDIS.cleanup(made)


def prefix_of(url: str) -> str:
    return parse_qs(urlsplit(url).query)["prefix"][0]


def keys_under(url: str) -> list[bytes]:
    client = client_for(url.split("?", 1)[0])
    try:
        return sorted(client.scan_iter(match=f"{prefix_of(url)}*", count=1000))
    finally:
        client.close()


def test_every_key_is_inside_the_prefix_and_a_namespace_in_one_slot(url: str) -> None:
    with open_store(url) as store:
        for label in HOSTILE:
            store.put((label, "child"), label, {"text": f"hostile {label}"})
            store.put((label,), "", {"text": "empty key"})
        for label in HOSTILE:
            assert store.get((label, "child"), label).value == {"text": f"hostile {label}"}  # type: ignore[union-attr]
            assert {i.key for i in store.search((label,))} == {label, ""}
    found = keys_under(url)
    assert all(_KEY.fullmatch(key.decode("ascii")) for key in found), found
    assert len(found) == 2 + 2 * len(HOSTILE) * 2  # version, registry; per namespace 2 keys
    client = client_for(url.split("?", 1)[0])
    try:
        if url.startswith("redis+cluster"):
            by_tag: dict[bytes, set[int]] = {}
            for key in found:
                if b"{" in key:
                    tag = key[key.index(b"{") : key.index(b"}") + 1]
                    by_tag.setdefault(tag, set()).add(client.keyslot(key))
            assert all(len(slots) == 1 for slots in by_tag.values())
    finally:
        client.close()


def test_prefixes_keep_stores_apart_and_a_checkpointer_may_share_one(url: str) -> None:
    from statekeeper.checkpointers import open_checkpointer

    other = url.replace(prefix_of(url), prefix_of(url) + ".other")
    with open_store(url) as a, open_store(other) as b, open_checkpointer(url) as saver:
        a.put(("docs",), "k", {"text": "in a"})
        b.put(("docs",), "k", {"text": "in b"})
        config = {"configurable": {"thread_id": "docs", "checkpoint_ns": ""}}
        saver.put(config, _checkpoint(), {}, {})
        assert a.get(("docs",), "k").value == {"text": "in a"}  # type: ignore[union-attr]
        assert [i.value for i in b.search(())] == [{"text": "in b"}]
        assert saver.get_tuple(config) is not None
        a.delete(("docs",), "k")
        assert saver.get_tuple(config) is not None


def _checkpoint() -> dict[str, object]:
    from langgraph.checkpoint.base import empty_checkpoint

    return dict(empty_checkpoint())


def test_the_registry_holds_exactly_the_namespaces_with_items(url: str) -> None:
    client = client_for(url.split("?", 1)[0])
    registry = f"{prefix_of(url)}:store:namespaces"
    try:
        with open_store(url) as store:
            store.put(("a", "b"), "k1", {"v": 1})
            store.put(("a", "b"), "k2", {"v": 1})
            store.put(("a",), "k", {"v": 1})
            assert sorted(client.zrange(registry, 0, -1)) == [b"a", b"a.b"]
            store.delete(("a", "b"), "k1")
            assert sorted(client.zrange(registry, 0, -1)) == [b"a", b"a.b"]
            store.delete(("a", "b"), "k2")
            assert client.zrange(registry, 0, -1) == [b"a"]
            assert store.list_namespaces() == [("a",)]
    finally:
        client.close()


def test_ttl_sets_pexpire_on_the_item_key(url: str) -> None:
    with open_store(url) as store:
        store.put(("t",), "short", {"v": 1}, ttl=1)
        store.put(("t",), "forever", {"v": 1})
    client = client_for(url.split("?", 1)[0])
    try:
        ttls = {
            key.rsplit(b":", 1)[1]: client.pttl(key) for key in keys_under(url) if b"item:" in key
        }
        assert 0 < ttls[b"short"] <= 60_000
        assert ttls[b"forever"] == -1
    finally:
        client.close()


def test_a_newer_layout_is_refused(url: str) -> None:
    with open_store(url):
        pass
    client = client_for(url.split("?", 1)[0])
    try:
        client.set(f"{prefix_of(url)}:store:version", 2)
    finally:
        client.close()
    with pytest.raises(SchemaVersionError, match="version 2"):
        open_store(url)


def test_bad_prefixes_and_options_are_refused() -> None:
    for bad in ("", "{tag}", "a*", "-x", "a b"):
        with pytest.raises(ConfigurationError, match="prefix"):
            open_store("redis://127.0.0.1:6379/0", prefix=bad)
    with pytest.raises(ConfigurationError, match="unknown Redis memory store option"):
        open_store("redis://127.0.0.1:6379/0?colour=red")
    with pytest.raises(ConfigurationError, match="database"):
        open_store("redis+cluster://127.0.0.1:7000/3")


def test_an_unreachable_server_names_the_url_without_its_password() -> None:
    with pytest.raises(StorageError) as info:
        open_store("redis://:hunter2@127.0.0.1:1/0?retries=0&socket_timeout=1")
    assert "127.0.0.1:1" in str(info.value)
    assert "hunter2" not in str(info.value)


def test_a_restarted_server_is_retried() -> None:
    server = REDIS.private()
    with open_store(f"redis://127.0.0.1:{server.port}/0?retries=8") as store:
        store.put(("r",), "k", {"v": 1})
        server.kill()
        restart = threading.Timer(0.3, server.start)
        restart.start()
        try:
            store.put(("r",), "k", {"v": 2})  # waits for the server through the retries
        finally:
            restart.join()
        assert store.get(("r",), "k").value == {"v": 2}  # type: ignore[union-attr]
    server.stop()


def test_a_closed_store_says_so(url: str) -> None:
    store: MemoryStore = open_store(url)
    store.close()
    with pytest.raises(StorageError, match="closed"):
        store.put(("a",), "k", {"v": 1})
    with pytest.raises(StorageError, match="closed"):
        store.sweep_ttl()


def test_importing_the_memory_package_does_not_import_redis() -> None:
    code = (
        "import sys, statekeeper.memory, statekeeper.memory.store;"
        "statekeeper.memory.store.open_store('memory://').close();"
        "print('redis' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
