"""Append deltas: exact reconstruction, and refusal whenever the new list is not the old
list with elements appended."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage

from statekeeper._storage.deltas import (
    MAX_CHAIN,
    RecentPayloads,
    Remembered,
    StoredValue,
    ValuePlanner,
    append_delta,
    apply_delta,
    rebuild,
    rebuild_all,
)
from statekeeper._storage.payload import safe_serde
from statekeeper.errors import SerializationError

SERDE = safe_serde()
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), st.text(), st.binary()
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4), max_leaves=8)


def _bytes(value: object) -> bytes:
    type_, data = SERDE.dumps_typed(value)
    assert type_ == "msgpack"
    return data


@given(st.lists(values, max_size=40), st.lists(values, max_size=40))
def test_appending_elements_round_trips_exactly(old: list, added: list) -> None:
    base, new = _bytes(old), _bytes(old + added)
    delta = append_delta(base, new)
    assert delta is not None
    assert apply_delta(base, delta) == new
    assert len(delta) <= len(new) - len(base) + 6


@given(st.lists(values, min_size=1, max_size=20), st.lists(values, min_size=1, max_size=5))
def test_anything_but_an_append_is_refused(old: list, other: list) -> None:
    changed = [other[0], *old[1:]] if old[0] != other[0] else old[1:] + other
    base, new = _bytes(old), _bytes(changed)
    if new[1:].startswith(base[1:]) or new.startswith(base):
        return  # the change happens to be an append after all
    delta = append_delta(base, new)
    assert delta is None or apply_delta(base, delta) == new


def test_chat_history_deltas_hold_only_the_new_messages() -> None:
    history = [HumanMessage(f"question {i}?", id=f"h{i}") for i in range(100)]
    base = _bytes(history)
    grown = _bytes([*history, AIMessage("an answer", id="a")])
    delta = append_delta(base, grown)
    assert delta is not None
    assert len(delta) < 200 < len(base)
    assert SERDE.loads_typed(("msgpack", apply_delta(base, delta)))[-1].content == "an answer"


@pytest.mark.parametrize(
    ("base", "new"),
    [
        (_bytes({"a": 1}), _bytes({"a": 1, "b": 2})),  # maps are not arrays
        (_bytes("text"), _bytes("text and more")),
        (_bytes([1, 2, 3]), _bytes([1, 2])),  # shrunk
        (_bytes([1, 2, 3]), _bytes([0, 1, 2, 3])),  # prepended
        (b"", _bytes([1])),
    ],
)
def test_non_appends_are_not_deltas(base: bytes, new: bytes) -> None:
    assert append_delta(base, new) is None


def test_a_corrupt_delta_is_reported() -> None:
    with pytest.raises(SerializationError):
        apply_delta(_bytes("not an array"), b"\x01\x91")
    with pytest.raises(SerializationError):
        apply_delta(_bytes([1]), b"\x09")


def test_recent_payloads_stay_within_their_byte_budget() -> None:
    cache = RecentPayloads(max_bytes=100)
    for i in range(10):
        cache.put(i, Remembered(version=str(i), data=b"x" * 30, crc=0, depth=0))
    kept = [i for i in range(10) if cache.get(i) is not None]
    assert kept == [7, 8, 9]
    cache.put("huge", Remembered(version="h", data=b"x" * 101, crc=0, depth=0))
    assert cache.get("huge") is None
    cache.discard(9)
    assert cache.get(9) is None


def _store_chain(values: list[list[str]]) -> dict[str, StoredValue]:
    """Plan each value in turn as a backend would, keeping what it would store."""
    recent = RecentPayloads()
    stored: dict[str, StoredValue] = {}
    for i, value in enumerate(values):
        plan = ValuePlanner(recent).plan(SERDE, "k", "messages", f"v{i:03}", value)
        stored[plan.stored.version] = plan.stored
        assert plan.remember is not None
        recent.put("k", plan.remember)
    return stored


def _chain_of(stored: dict[str, StoredValue], version: str) -> list[StoredValue]:
    chain = [stored[version]]
    while chain[-1].base is not None:
        chain.append(stored[chain[-1].base])
    return chain


def test_a_growing_list_is_stored_as_deltas_with_a_full_copy_every_max_chain() -> None:
    values = [[f"message {j}?" for j in range(i + 1)] for i in range(40)]
    stored = _store_chain(values)
    full = [v for v in stored.values() if v.codec != "append"]
    assert len(full) == 3  # versions 0, 17 and 34: MAX_CHAIN deltas between full copies
    for i, value in enumerate(values):
        chain = _chain_of(stored, f"v{i:03}")
        assert len(chain) <= MAX_CHAIN + 1
        assert SERDE.loads_typed(("msgpack", rebuild(chain))) == value
    assert sum(len(v.data) for v in stored.values()) < len(_bytes(values[-1])) * 5


def test_values_that_are_not_lists_are_stored_whole_and_compressed() -> None:
    recent = RecentPayloads()
    plan = ValuePlanner(recent, compress=True).plan(SERDE, "k", "doc", "v1", "text " * 1000)
    assert plan.stored.codec == "zlib"
    assert plan.remember is None
    assert SERDE.loads_typed(("msgpack", rebuild([plan.stored]))) == "text " * 1000


def test_a_lone_surrogate_in_an_appended_element_is_refused() -> None:
    recent = RecentPayloads()
    first = ValuePlanner(recent).plan(SERDE, "k", "m", "v1", ["ok?"])
    assert first.remember is not None
    recent.put("k", first.remember)
    with pytest.raises(SerializationError, match="lone surrogate"):
        ValuePlanner(recent).plan(SERDE, "k", "m", "v2", ["ok?", "bad \ud800"])


def test_a_corrupt_chain_is_detected_by_its_checksum() -> None:
    stored = _store_chain([["a"], ["a", "b"], ["a", "b", "c"]])
    chain = _chain_of(stored, "v002")
    base = chain[-1]
    tampered = StoredValue(base.channel, base.version, base.type, "", _bytes(["x"]), None, base.crc)
    with pytest.raises(SerializationError, match="checksum mismatch"):
        rebuild([*chain[:-1], tampered])


def test_rebuild_all_starts_from_an_already_rebuilt_base() -> None:
    values = [["a"], ["a", "b"], ["a", "b", "c"], ["a", "b", "c", "d"]]
    stored = _store_chain(values)
    chain = _chain_of(stored, "v003")
    everything = rebuild_all(chain)
    assert [SERDE.loads_typed(("msgpack", data)) for data in everything] == values[::-1]
    assert rebuild_all(chain[:2], below=everything[2]) == everything[:2]
