"""Redis integrity: every kind of stored record, damaged every way -- bits flipped,
bytes cut off, fields and keys deleted, keys overwritten with another type -- is either
read back exactly or refused with CorruptCheckpointError / StorageError naming it; never
a wrong value, never a raw driver exception; and ``verify()`` finds it. Also: fallback
reads, ``verify(repair=True)``, and keys of layout 1 (no checksums) read and sealed.

The damage is done with a plain client to the keys ``docs/redis.md`` lays out
(:func:`tests.backends.test_redis.thread_key`); every case has a prefix of its own."""

from __future__ import annotations

import asyncio
import json
import logging
import operator
import random
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph

from statekeeper.backends.redis._client import ordered, pack
from statekeeper.checkpointers import open_checkpointer
from statekeeper.checkpointers.heads import scan_heads
from statekeeper.errors import (
    CorruptCheckpointError,
    Damage,
    SerializationError,
    StorageError,
)
from tests.backends.test_redis import (
    INDEX_SETS,
    THREAD_KEYS,
    _no_ns,
    admin_of,
    assert_lists_as_scanned,
    cfg,
    index_sizes,
    place,
    prefix_of,
    put_at,
    scanned,
    slot_key,
    thread_key,
)
from tests.redis_servers import REDIS, client_for

THREAD = "chat-1"
OTHER = "chat-2"


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


# -- a thread with every kind of record ----------------------------------------------------


class Chat(TypedDict):
    log: Annotated[list[str], operator.add]
    turn: int
    note: str


def _reply(state: Chat) -> dict[str, Any]:
    turn = state["turn"] + 1
    return {"log": [f"reply {turn} " + "words " * 30], "turn": turn, "note": "x" * (turn * 400)}


def chat_graph(saver: Any) -> Any:
    builder = StateGraph(Chat)
    builder.add_node("reply", _reply)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    return builder.compile(checkpointer=saver)


def build(url: str, turns: int = 4) -> None:
    """Two threads of a few turns each: checkpoint records with metadata, full values
    (zlib-compressed ones too), append deltas of ``log``, and pending writes -- also on
    the newest checkpoint."""
    with open_checkpointer(url) as saver:
        graph = chat_graph(saver)
        for thread_id in (THREAD, OTHER):
            for turn in range(turns):
                config = {
                    "configurable": {"thread_id": thread_id},
                    "metadata": {"run_id": f"r{turn}"},
                }
                start = {"log": [f"user {turn}"], "turn": turn, "note": ""} if turn == 0 else None
                graph.invoke(start or {"log": [f"user {turn}"]}, config)
            latest = saver.get_tuple(cfg(thread_id)).config
            saver.put_writes(latest, [("log", ["pending"]), ("note", "later")], "task-x")


def reads(saver: Any, ids: list[str]) -> dict[str, Callable[[], Any]]:
    """Every way to read the thread back, each a thunk."""
    latest = cfg(THREAD)
    out: dict[str, Callable[[], Any]] = {
        "get_tuple latest": lambda: saver.get_tuple(latest),
        "list thread": lambda: list(saver.list(latest)),
        "list thread limit 2": lambda: list(saver.list(latest, limit=2)),
        "list filtered": lambda: list(saver.list(latest, filter={"step": 1})),
        "list all": lambda: list(saver.list(None)),
        "aget_tuple latest": lambda: asyncio.run(saver.aget_tuple(latest)),
        "delta history": lambda: saver.get_delta_channel_history(config=latest, channels=["log"]),
    }
    for checkpoint_id in ids:
        by_id = cfg(THREAD, "", checkpoint_id)
        out[f"get_tuple {checkpoint_id}"] = lambda by_id=by_id: saver.get_tuple(by_id)
        out[f"get_writes {checkpoint_id}"] = lambda by_id=by_id: saver.get_writes(by_id)
    return out


def originals(url: str) -> tuple[list[str], dict[str, Any]]:
    with open_checkpointer(url) as saver:
        ids = [t.checkpoint["id"] for t in saver.list(cfg(THREAD))]
        return ids, {name: read() for name, read in reads(saver, ids).items()}


# -- the damage ------------------------------------------------------------------------------


def flip(data: bytes, rng: random.Random) -> bytes:
    """``data`` with 1-3 bits flipped at random positions."""
    out = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
    return bytes(out)


def _frame(data: bytes) -> list[bytes]:
    """The parts of a sealed value (type, codec, base field, crc), for choosing one."""
    parts, pos = [], 5
    for _ in range(4):
        colon = data.index(b":", pos)
        end = colon + 1 + int(data[pos:colon])
        parts.append(data[colon + 1 : end])
        pos = end
    return parts


def pick(client: Any, key: bytes, rng: random.Random, kind: str = "") -> bytes:
    """A field of hash ``key``: any (sorted, then seeded), or for ``blobs`` a non-empty
    value that is a full copy (``kind="value"``) or an append delta (``"delta"``)."""
    fields = sorted(client.hkeys(key))
    if kind:
        values = client.hgetall(key)
        fields = [
            f
            for f in fields
            if values[f] and (_frame(values[f])[1] == b"append") == (kind == "delta")
        ]
    assert fields, (key, kind)
    return rng.choice(fields)


@dataclass(frozen=True)
class Case:
    name: str
    damage: Callable[[Any, Any, random.Random], None]  # (client, saver, rng)
    read_detects: bool = True  # some read must refuse (else only verify sees it: no wrong value)


def _hash_field(name: str, how: str, kind: str = "") -> Callable[[Any, Any, random.Random], None]:
    def damage(client: Any, saver: Any, rng: random.Random) -> None:
        key = thread_key(saver, THREAD, name)
        field = pick(client, key, rng, kind)
        data = client.hget(key, field)
        if how == "flip":
            client.hset(key, field, flip(data, rng))
        elif how == "truncate":
            client.hset(key, field, data[: rng.randrange(len(data))])
        elif how == "truncate-to-seal":
            client.hset(key, field, data[:5])
        elif how == "append":
            client.hset(key, field, data + b"\x00")
        else:
            client.hdel(key, field)

    return damage


def _delete_key(name: str) -> Callable[[Any, Any, random.Random], None]:
    return lambda client, saver, rng: client.delete(thread_key(saver, THREAD, name))


def _wrong_type(name: str) -> Callable[[Any, Any, random.Random], None]:
    def damage(client: Any, saver: Any, rng: random.Random) -> None:
        key = thread_key(saver, THREAD, name)
        client.delete(key)
        client.set(key, "written by another program")

    return damage


def _zset_member(name: str) -> Callable[[Any, Any, random.Random], None]:
    def damage(client: Any, saver: Any, rng: random.Random) -> None:
        key = thread_key(saver, THREAD, name)
        client.zrem(key, rng.choice(sorted(client.zrange(key, 0, -1))))

    return damage


def _refs_field(prefix: bytes, exact: bool = False) -> Callable[[Any, Any, random.Random], None]:
    """Delete a field of refs: the stamp (``exact``), or one starting with ``prefix``
    (``\\xfd`` write counts, ``\\xfe`` delta bases, ``\\xff`` CRCs; ``b""``: counts)."""

    def damage(client: Any, saver: Any, rng: random.Random) -> None:
        key = thread_key(saver, THREAD, "refs")
        fields = sorted(client.hkeys(key))
        if exact:
            chosen = prefix
        elif prefix:
            chosen = rng.choice([f for f in fields if f.startswith(prefix) and len(f) > 1])
        else:
            chosen = rng.choice([f for f in fields if f[:1] not in (b"\xfd", b"\xfe", b"\xff")])
        assert client.hdel(key, chosen) == 1

    return damage


def _registry(how: str) -> Callable[[Any, Any, random.Random], None]:
    def damage(client: Any, saver: Any, rng: random.Random) -> None:
        key = f"{saver.prefix}:threads"
        if how == "member":
            client.zrem(key, THREAD)
        elif how == "key":
            client.delete(key)
        else:
            client.delete(key)
            client.set(key, "x")

    return damage


RECORDS = [("cp", ""), ("writes", ""), ("blobs", "value"), ("blobs", "delta")]
CASES = [
    *(
        Case(f"{name}{'-' + kind if kind else ''} {how}", _hash_field(name, how, kind))
        for name, kind in RECORDS
        for how in ("flip", "flip", "truncate", "truncate", "truncate-to-seal", "append", "delete")
    ),
    *(
        Case(f"{name} key deleted", _delete_key(name), name != "runs")
        for name in ("ids", "ns", "cp", "blobs", "refs", "writes", "wix", "runs")
    ),
    *(
        Case(f"{name} key of another type", _wrong_type(name), name != "runs")
        for name in ("ids", "ns", "cp", "blobs", "refs", "writes", "wix", "runs")
    ),
    *(
        Case(f"{name} member deleted", _zset_member(name), name != "runs")
        for name in ("ids", "ns", "wix", "runs")
    ),
    Case("refs stamp deleted", _refs_field(b"\xff", exact=True)),
    Case("refs write count deleted", _refs_field(b"\xfd")),
    Case("refs delta base deleted", _refs_field(b"\xfe")),
    Case("refs CRC deleted", _refs_field(b"\xff"), read_detects=False),
    Case("refs reference count deleted", _refs_field(b""), read_detects=False),
    Case("registry member deleted", _registry("member")),
    Case("registry deleted", _registry("key")),
    Case("registry of another type", _registry("type")),
]
ALLOWED = (CorruptCheckpointError, StorageError)


def _outcome(read: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "ok", read()
    except ALLOWED as exc:
        return "refused", exc


@pytest.mark.parametrize("index", range(len(CASES)), ids=[c.name for c in CASES])
def test_damage_is_refused_or_read_exactly_and_verify_finds_it(
    url: str, index: int, caplog: pytest.LogCaptureFixture
) -> None:
    case = CASES[index]
    rng = random.Random(index)
    build(url)
    ids, original = originals(url)
    client = client_for(REDIS.prefixes[prefix_of(url)])
    with open_checkpointer(url) as saver:
        case.damage(client, saver, rng)
    refused = []
    with open_checkpointer(url) as saver:  # a fresh reader: no values remembered
        for name, read in reads(saver, ids).items():
            kind, got = _outcome(read)  # anything else (a raw driver error) fails here
            if kind == "ok":
                assert got == original[name], f"{case.name}: {name} returned a wrong value"
            else:
                refused.append(got)
        found = saver.verify()
    if case.read_detects:
        assert refused, f"{case.name}: no read noticed"
    assert found, f"{case.name}: verify() found nothing"
    assert all(isinstance(d, Damage) and d.backend == "redis" and d.path for d in found)
    for exc in refused:
        assert "\n" not in str(exc)
        if isinstance(exc, CorruptCheckpointError):
            assert exc.backend == "redis"
            assert exc.path.startswith(prefix_of(url) + ":")
            assert exc.record in ("checkpoint", "metadata", "writes", "value", "delta", "index")


GARBAGE = {
    "nul": b"\x00",
    "nul-length": b"\x00:",
    "nul-count": b"1:a1:b0:1:\x00",  # a write's parts hold no number: its codec is "\x00"
    "not-utf8": b"1:\xff1:b0:0:",
}


@pytest.mark.parametrize(
    ("name", "garbage"),
    [
        (n, g)
        for n in ("cp", "blobs", "writes")
        for g in GARBAGE
        if (n, g) != ("writes", "nul-count")
    ],
)
def test_a_record_that_cannot_be_read_is_reported_in_words(
    url: str, name: str, garbage: str
) -> None:
    """Before: what int() and the parser said, quoting bytes ("invalid literal for int()
    with base 10: b'\\x00'", "subsection not found")."""
    build(url)
    client = client_for(REDIS.prefixes[prefix_of(url)])
    with open_checkpointer(url) as saver:
        key = thread_key(saver, THREAD, name)
        for field in client.hkeys(key):
            client.hset(key, field, GARBAGE[garbage])
        outcomes = [_outcome(read) for read in reads(saver, []).values()]
        said = [str(got) for kind, got in outcomes if kind == "refused"]
        said += [d.reason for d in saver.verify()]
    assert said
    for text in said:
        assert not re.search(r"invalid literal|subsection|can't decode|b'\\x", text), text
        assert "\n" not in text


@pytest.mark.parametrize(
    "index",
    [i for i, c in enumerate(CASES) if c.read_detects and "registry" not in c.name],
    ids=[c.name for c in CASES if c.read_detects and "registry" not in c.name],
)
def test_graphs_on_a_damaged_thread_get_statekeeper_errors_only(url: str, index: int) -> None:
    build(url)
    client = client_for(REDIS.prefixes[prefix_of(url)])
    with open_checkpointer(url) as saver:
        CASES[index].damage(client, saver, random.Random(index))
    with open_checkpointer(url) as saver:
        graph = chat_graph(saver)
        config = {"configurable": {"thread_id": THREAD}}
        for call in (lambda: graph.get_state(config), lambda: graph.invoke(None, config)):
            raised = _raised(call)
            # refused with a statekeeper error, or served (the damage was not on the path)
            assert raised is None or isinstance(raised, (*ALLOWED, SerializationError)), raised


def _raised(call: Callable[[], Any]) -> Exception | None:
    try:
        call()
    except Exception as exc:  # any type: the test asserts which
        return exc
    return None


def test_a_corrupt_checkpoint_names_everything(url: str) -> None:
    build(url)
    client = client_for(REDIS.prefixes[prefix_of(url)])
    with open_checkpointer(url) as saver:
        newest = saver.get_tuple(cfg(THREAD)).checkpoint["id"]
        cp = thread_key(saver, THREAD, "cp")
        ref = next(f for f in client.hkeys(cp) if newest.encode() in f)
        client.hset(cp, ref, flip(client.hget(cp, ref), random.Random(1)))
    with (
        open_checkpointer(url) as saver,
        pytest.raises(CorruptCheckpointError, match="checksum mismatch") as caught,
    ):
        saver.get_tuple(cfg(THREAD))
    err = caught.value
    assert (err.backend, err.thread_id, err.checkpoint_ns, err.checkpoint_id, err.record) == (
        "redis",
        THREAD,
        "",
        newest,
        "checkpoint",
    )
    assert err.path.startswith(cp.decode() + ":")
    assert str(err).count("\n") == 0


def test_fallback_serves_the_newest_intact_checkpoint_and_says_so(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    build(url)
    client = client_for(REDIS.prefixes[prefix_of(url)])
    with open_checkpointer(url) as saver:
        listed = list(saver.list(cfg(THREAD)))
        blobs = thread_key(saver, THREAD, "blobs")
        cp = thread_key(saver, THREAD, "cp")
        newest = listed[0].checkpoint["id"]
        ref = next(f for f in client.hkeys(cp) if newest.encode() in f)
        client.hset(cp, ref, client.hget(cp, ref)[:-3])  # truncated
    with open_checkpointer(f"{url}&on_corrupt=fallback") as saver:
        with caplog.at_level(logging.WARNING, "statekeeper.backends.redis.checkpointer"):
            tup = saver.get_tuple(cfg(THREAD))
            rest = list(saver.list(cfg(THREAD)))
        assert tup == listed[1]  # the newest intact one, exactly
        assert rest == listed[1:]
        assert any(newest in r.message and "fallback" in r.message for r in caplog.records)
        with pytest.raises(CorruptCheckpointError):  # asked for by id: that one, or an error
            saver.get_tuple(cfg(THREAD, "", newest))
        graph = chat_graph(saver)
        state = graph.get_state({"configurable": {"thread_id": THREAD}})
        assert state.config["configurable"]["checkpoint_id"] == listed[1].checkpoint["id"]
    del blobs


def test_fallback_skips_a_checkpoint_whose_value_is_gone(url: str) -> None:
    build(url)
    client = client_for(REDIS.prefixes[prefix_of(url)])
    with open_checkpointer(url) as saver:
        listed = list(saver.list(cfg(THREAD)))
        blobs = thread_key(saver, THREAD, "blobs")
        # the newest version of "note" is read by the newest checkpoint only
        field = max(f for f in client.hkeys(blobs) if b"note" in f)  # versions sort
        client.hdel(blobs, field)
    with (
        open_checkpointer(url) as saver,
        pytest.raises(CorruptCheckpointError, match="missing from blobs"),
    ):
        saver.get_tuple(cfg(THREAD))
    with open_checkpointer(url, on_corrupt="fallback") as saver:
        survivors = list(saver.list(cfg(THREAD)))
        assert survivors
        assert all(t in listed for t in survivors)
        assert len(survivors) < len(listed)


def test_repair_rebuilds_indexes_and_counts_and_keeps_every_record(url: str) -> None:
    build(url)
    client = client_for(REDIS.prefixes[prefix_of(url)])
    with open_checkpointer(url) as saver:
        ids, original = originals(url)
        key = {name: thread_key(saver, THREAD, name) for name in ("ids", "ns", "runs", "refs")}
        client.zrem(key["ids"], client.zrange(key["ids"], 0, 0)[0])
        client.zrem(key["ns"], client.zrange(key["ns"], 1, 1)[0])
        client.delete(key["runs"])
        counts = [f for f in client.hkeys(key["refs"]) if f[:1] not in (b"\xfd", b"\xfe", b"\xff")]
        client.hset(key["refs"], counts[0], 0)
        client.hdel(key["refs"], b"\xff")  # the stamp
        cp_before = client.hgetall(thread_key(saver, THREAD, "cp"))
        found = saver.verify(repair=True)
        assert {d.record for d in found} == {"index"}
        assert saver.verify() == []
        assert client.hgetall(thread_key(saver, THREAD, "cp")) == cp_before
        for name, read in reads(saver, ids).items():
            assert read() == original[name], name


def test_repair_reports_what_it_cannot_rebuild_and_deletes_nothing(url: str) -> None:
    build(url)
    client = client_for(REDIS.prefixes[prefix_of(url)])
    with open_checkpointer(url) as saver:
        cp = thread_key(saver, THREAD, "cp")
        ref = sorted(client.hkeys(cp))[1]
        client.hset(cp, ref, flip(client.hget(cp, ref), random.Random(3)))
        damaged = client.hget(cp, ref)
        first = saver.verify(repair=True)
        assert [d.record for d in first if d.path.endswith(":cp:" + _esc(ref))] == ["checkpoint"]
        again = saver.verify(repair=True)
        assert [d.reason for d in again] == [d.reason for d in first if "checksum" in d.reason]
        assert client.hget(cp, ref) == damaged


def _esc(field: bytes) -> str:
    from statekeeper.backends.redis._integrity.seal import escape

    return escape(field)


def test_verify_and_repair_refuse_nothing_on_an_intact_store(url: str) -> None:
    build(url)
    with open_checkpointer(url) as saver:
        assert saver.verify() == []
        assert saver.verify(repair=True) == []


# -- layout 1: no checksums yet -------------------------------------------------------------


def _unseal_all(client: Any, saver: Any, thread_id: str) -> None:
    """Turn a thread into what layout 1 stored: records, values and writes without their
    seal, refs without write counts."""
    for name in ("cp", "blobs", "writes"):
        key = thread_key(saver, thread_id, name)
        for field, data in client.hgetall(key).items():
            if data[:1] == b"\xfe":
                client.hset(key, field, data[5:])
    refs = thread_key(saver, thread_id, "refs")
    for field in client.hkeys(refs):
        if field[:1] == b"\xfd":
            client.hdel(refs, field)
    client.set(f"{saver.prefix}:layout", "1")
    registry = f"{saver.prefix}:{{{saver.prefix}:threads}}"
    not_in_1 = ("count", "heads", "head", "checkpoints", "checkpoints:by-thread")
    client.delete(*(f"{registry}:{name}" for name in not_in_1))


def test_layout_1_keys_are_read_and_repair_seals_them(url: str) -> None:
    build(url)
    ids, original = originals(url)
    client = client_for(REDIS.prefixes[prefix_of(url)])
    with open_checkpointer(url) as saver:
        _unseal_all(client, saver, THREAD)
        _unseal_all(client, saver, OTHER)
    with open_checkpointer(f"{url}&mode=ro") as saver:  # read as they are, not upgraded
        assert {name: read() for name, read in reads(saver, ids).items()} == original
        assert saver.verify() == []
        scanned = scan_heads(saver)
        assert saver.thread_heads(limit=10) == scanned  # no index yet: a scan
    assert client.get(f"{prefix_of(url)}:layout") == b"1"
    assert not client.exists(f"{prefix_of(url)}:{{{prefix_of(url)}:threads}}:heads")
    with open_checkpointer(url) as saver:  # read-write: the version is upgraded
        assert client.get(f"{prefix_of(url)}:layout") == b"4"
        registry = f"{prefix_of(url)}:{{{prefix_of(url)}:threads}}"
        assert client.zcard(f"{registry}:heads") == 2
        assert client.zcard(f"{registry}:checkpoints") == 2 * len(ids)  # both threads
        assert saver.thread_heads(limit=10) == scanned  # the index, built on opening
        assert saver.verify(repair=True) == []  # sealed and counted: not damage
        cp = client.hgetall(thread_key(saver, THREAD, "cp"))
        assert all(data[:1] == b"\xfe" for data in cp.values())
        assert {name: read() for name, read in reads(saver, ids).items()} == original
        # sealed now: damage that layout 1 could not see is refused
        ref = sorted(cp)[0]
        client.hset(thread_key(saver, THREAD, "cp"), ref, flip(cp[ref], random.Random(5)))
        assert saver.verify()


def test_a_layout_1_record_that_does_not_parse_is_damage_not_a_raw_error(url: str) -> None:
    build(url)
    client = client_for(REDIS.prefixes[prefix_of(url)])
    with open_checkpointer(url) as saver:
        _unseal_all(client, saver, THREAD)
        cp = thread_key(saver, THREAD, "cp")
        ref = sorted(client.hkeys(cp))[-1]
        client.hset(cp, ref, pack(b"", b"9", b"0") + b"garbage")
    with open_checkpointer(url) as saver:
        with pytest.raises(CorruptCheckpointError, match="cannot be read"):
            list(saver.list(cfg(THREAD)))
        assert saver.verify()


# -- Cluster ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "index",
    [
        i
        for i, c in enumerate(CASES)
        if c.name
        in ("cp flip", "blobs key deleted", "refs key of another type", "registry deleted")
    ],
)
def test_damage_on_a_cluster(cluster_url: str, index: int) -> None:
    case = CASES[index]
    build(cluster_url, turns=2)
    ids, original = originals(cluster_url)
    admin = client_for(REDIS.prefixes[prefix_of(cluster_url)])
    with open_checkpointer(cluster_url) as saver:
        case.damage(admin, saver, random.Random(index))
    with open_checkpointer(cluster_url) as saver:
        outcomes = [_outcome(read) for read in reads(saver, ids).values()]
        for (kind, got), name in zip(outcomes, reads(saver, ids), strict=True):
            assert kind == "refused" or got == original[name], name
        assert any(kind == "refused" for kind, _ in outcomes)
        assert saver.verify()


# -- every byte ------------------------------------------------------------------------------


def test_every_single_bit_flip_and_every_truncation_of_a_stored_record_is_refused(
    url: str,
) -> None:
    """Checked where a read checks them, for one stored record of each kind (a value:
    its seal, then the CRC of its rebuilt payload): a CRC-32 catches every single-bit
    error and every cut (a layout-2 record always has its seal)."""
    from statekeeper.backends.redis._integrity.records import Payloads, Record, decode_writes
    from statekeeper.backends.redis._integrity.seal import Bad

    build(url, turns=2)
    client = client_for(REDIS.prefixes[prefix_of(url)])
    with open_checkpointer(url) as saver:
        serde = saver.serde
        stored = {
            name: sorted(client.hgetall(thread_key(saver, THREAD, name)).items())[-1]
            for name in ("cp", "writes")
        }
        blobs = client.hgetall(thread_key(saver, THREAD, "blobs"))
        # a full value (a delta needs its base), compressed or not
        stored["blobs"] = max((f, v) for f, v in blobs.items() if v and b"append" not in v[:40])
    checks: dict[str, Callable[[bytes, bytes], Any]] = {
        "cp": lambda field, data: Record.parse(data, field),
        "blobs": lambda field, data: Payloads().payload(field, [data]),
        "writes": lambda field, data: decode_writes(serde, [field, data], None, b"1", b""),
    }
    for name, (field, data) in stored.items():
        checks[name](field, data)  # intact: read
        for at in range(len(data)):
            for bit in (0, 7):
                damaged = bytearray(data)
                damaged[at] ^= 1 << bit
                with pytest.raises(Bad):
                    checks[name](field, bytes(damaged))
            with pytest.raises(Bad):
                checks[name](field, data[:at])


# -- the indexes across threads: stale entries, missing ones, layout 3 ------------------------


@pytest.fixture(params=["standalone", "cluster"])
def any_url(request: pytest.FixtureRequest) -> Iterator[str]:
    made = REDIS.url(request.param)
    yield made
    REDIS.cleanup(made)


FILTERS = ({"user": "u1"}, {"user": "u0", "step": 1}, {"step": 2})


def _indexed_history(url: str) -> list[str]:
    threads = ["a", "b", "c", "线程"]
    with open_checkpointer(url, index_metadata=["user"]) as saver:
        for step in range(3):
            for i, thread_id in enumerate(threads):
                put_at(saver, thread_id, "sub" if step == 1 else "", step=step, user=f"u{i % 2}")
    return threads


def _entries(thread_id: str, checkpoint_id: str, ns: str = "", user: str | None = None) -> dict:
    """The members a checkpoint has in each index set, by set name (docs/redis.md)."""
    c, t, n = ordered(checkpoint_id), ordered(thread_id), ordered(ns)
    found = {"checkpoints": c + t + n, "checkpoints:by-thread": t + c + n}
    if user is not None:
        v = ordered(json.dumps(user))
        found |= {"meta:user": v + c + t + n, "meta:user:by-thread": t + v + c + n}
    return found


def _add(url: str, members: dict[str, bytes]) -> None:
    admin = admin_of(url)
    for name, member in members.items():
        admin.zadd(slot_key(url, name), {member: 0})


def test_stale_entries_never_change_an_answer_and_are_cleaned(any_url: str) -> None:
    """Entries naming checkpoints that are not there -- a put killed before its script, a
    deletion killed after the data went, a thread whose keys expired -- are left out of
    every listing and are no damage; a read-only reader changes nothing, a read-write one
    removes those no stored checkpoint can still need (all of them on a standalone
    server; in a Cluster those of threads gone, as a put under way elsewhere cannot be
    told apart), and verify(repair=True) the rest."""
    from langgraph.checkpoint.base.id import uuid6

    threads = _indexed_history(any_url)
    admin = admin_of(any_url)
    never = str(uuid6())  # a put killed before its script: its entries only
    _add(any_url, _entries("a", never, user="u1"))
    _add(any_url, _entries("ghost", never, user="u1"))
    with open_checkpointer(any_url) as saver:  # a deletion killed after the data went
        stored_b = [place(t) for t in saver.list(_no_ns("b"))]
        admin.delete(*(thread_key(saver, "b", name) for name in THREAD_KEYS))
        admin.zrem(f"{saver.prefix}:threads", "b")  # (delete_thread's first step...)
        admin.decr(slot_key(any_url, "count"))
        admin.zrem(slot_key(any_url, "heads"), admin.hget(slot_key(any_url, "head"), ordered("b")))
        admin.hdel(slot_key(any_url, "head"), ordered("b"))
    with open_checkpointer(any_url, ttl=0.3) as short:  # keys that expire
        put_at(short, "brief", step=7, user="u1")
    time.sleep(0.5)
    threads.remove("b")
    sizes = index_sizes(any_url, *INDEX_SETS)
    assert sizes[0] == 3 * 4 + 2 + 1
    assert len(stored_b) == 3

    with open_checkpointer(f"{any_url}&mode=ro") as reader:
        assert_lists_as_scanned(reader, threads, FILTERS)
        # stale entries are no damage (the thread index's entry of the expired thread
        # is, on a standalone server to a verify without a ttl, until a sweep removes it)
        assert {d.path for d in reader.verify()} <= {slot_key(any_url, "heads")}
    assert index_sizes(any_url, *INDEX_SETS) == sizes  # read-only: nothing removed

    with open_checkpointer(any_url) as saver:
        assert_lists_as_scanned(saver, threads, FILTERS)
        left = index_sizes(any_url, *INDEX_SETS)
        if saver._plans.cluster:  # only the entries of the killed put on "a" are left
            assert left == [9 + 1] * 4
        else:
            assert left == [9] * 4
        assert saver.verify(repair=True) == []
        assert index_sizes(any_url, *INDEX_SETS) == [9] * 4
        assert_lists_as_scanned(saver, threads, FILTERS)


def test_a_missing_or_damaged_entry_is_reported_and_repaired(
    any_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    threads = _indexed_history(any_url)
    admin = admin_of(any_url)
    with open_checkpointer(any_url) as saver:
        expected = scanned(saver, threads)
        victims = {}
        for name, t in zip(INDEX_SETS, expected[::3], strict=False):
            checkpoint_id, thread_id, ns = place(t)
            member = _entries(thread_id, checkpoint_id, ns, t.metadata["user"])[name]
            assert admin.zrem(slot_key(any_url, name), member) == 1
            victims[checkpoint_id] = name
        admin.zadd(slot_key(any_url, "checkpoints"), {b"no entry": 0})
        with caplog.at_level(logging.WARNING):
            listed = list(saver.list(None))  # a damaged member never stops a listing
        assert len(listed) == len(expected) - 1  # the one missing from the checkpoint index
        assert "no checkpoint entry" in caplog.text

        found = saver.verify()
        missing = [d for d in found if d.checkpoint_id is not None]
        assert {d.checkpoint_id for d in missing} == set(victims)
        assert all(d.record == "index" and d.reason.endswith("is missing") for d in missing)
        assert [d.path for d in found if d.checkpoint_id is None] == [
            slot_key(any_url, "checkpoints") + ":no entry"
        ]
        repaired = saver.verify(repair=True)
        assert sorted(d.path for d in repaired) == sorted(d.path for d in found)
        assert saver.verify() == []
        assert index_sizes(any_url, *INDEX_SETS) == [12, 12, 12, 12]
        assert_lists_as_scanned(saver, threads, FILTERS)


def test_layout_3_keys_are_merged_read_only_and_indexed_on_a_read_write_open(
    any_url: str,
) -> None:
    threads = _indexed_history(any_url)
    admin = admin_of(any_url)
    with open_checkpointer(any_url) as saver:
        expected = [place(t) for t in scanned(saver, threads)]
    # what layout 3 stored: no index across threads, no declared keys
    admin.delete(*(slot_key(any_url, name) for name in (*INDEX_SETS, "indexed")))
    admin.set(f"{prefix_of(any_url)}:layout", "3")
    with open_checkpointer(f"{any_url}&mode=ro") as reader:
        assert reader._plans.indexed  # layout 3 has the thread index...
        assert not reader._plans.listed  # ...but not the checkpoint index
        assert [place(t) for t in reader.list(None)] == expected  # every thread merged
        assert_lists_as_scanned(reader, threads, FILTERS)
        assert [h.thread_id for h in reader.thread_heads(limit=10)] == threads[::-1]
        assert reader.verify() == []
    assert index_sizes(any_url, *INDEX_SETS) == [0, 0, 0, 0]
    assert admin.get(f"{prefix_of(any_url)}:layout") == b"3"
    with open_checkpointer(any_url, index_metadata=["user"]) as saver:  # upgraded, built
        assert admin.get(f"{prefix_of(any_url)}:layout") == b"4"
        assert index_sizes(any_url, *INDEX_SETS) == [12, 12, 12, 12]
        assert [place(t) for t in saver.list(None)] == expected
        assert_lists_as_scanned(saver, threads, FILTERS)
        assert saver.verify() == []


def test_an_index_key_of_another_type_is_refused_with_its_name(url: str) -> None:
    threads = _indexed_history(url)
    admin = admin_of(url)
    key = slot_key(url, "meta:user")
    admin.delete(key)
    admin.set(key, "written by another program")
    with open_checkpointer(url) as saver:
        assert len(list(saver.list(None))) == 12  # the checkpoint index is intact
        for call in (
            lambda: list(saver.list(None, filter={"user": "u1"})),
            lambda: put_at(saver, threads[0], step=9, user="u1"),
        ):
            with pytest.raises(CorruptCheckpointError) as raised:
                call()
            assert raised.value.path == key
            assert raised.value.record == "index"
        assert [d.path for d in saver.verify()] == [key]
