"""Append deltas: exact reconstruction, and refusal whenever the new list is not the old
list with elements appended."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage

from statekeeper._storage.crc import crc32_combine
from statekeeper._storage.deltas import (
    StoredValue,
    ValuePlanner,
    append_delta,
    apply_delta,
    rebuild,
    rebuild_all,
)
from statekeeper._storage.payload import ZLIB_DICT, safe_serde
from statekeeper._storage.remembered import MAX_CHAIN, RecentPayloads, Remembered
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
        raw = _bytes(["x" * 27])  # a body of 28 bytes
        cache.put(i, Remembered.whole(str(i), raw, 0, None))
    kept = [i for i in range(10) if cache.get(i) is not None]
    assert kept == [7, 8, 9]
    cache.put("huge", Remembered.whole("h", _bytes(["x" * 100]), 0, None))
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


def _base4(n: int) -> list[int]:
    digits = []
    while n:
        n, digit = divmod(n, 4)
        digits.append(digit)
    return digits  # least significant first


def _skip_base_of(i: int) -> int:
    """i less the place value of its lowest nonzero base-4 digit."""
    digits = _base4(i)
    lowest = next(place for place, digit in enumerate(digits) if digit)
    return i - 4**lowest


def test_a_growing_list_is_stored_as_skip_deltas_on_one_full_copy() -> None:
    assert [_skip_base_of(i) for i in (1, 3, 4, 7, 8, 16, 20, 21)] == [0, 2, 0, 6, 4, 0, 16, 20]
    values = [[f"message {j}?" for j in range(i + 1)] for i in range(40)]
    stored = _store_chain(values)
    full = [v for v in stored.values() if v.base is None]
    assert [v.version for v in full] == ["v000"]
    for i, value in enumerate(values):
        if i:
            assert stored[f"v{i:03}"].base == f"v{_skip_base_of(i):03}"
        chain = _chain_of(stored, f"v{i:03}")
        assert len(chain) == sum(_base4(i)) + 1 <= MAX_CHAIN + 1
        assert SERDE.loads_typed(("msgpack", rebuild(chain))) == value
    assert sum(len(v.data) for v in stored.values()) < len(_bytes(values[-1])) * 5


def test_a_long_run_of_appends_keeps_every_chain_within_max_chain() -> None:
    history: list[object] = []
    recent = RecentPayloads()
    planner = ValuePlanner(recent, compress=False)
    depth: dict[str, int] = {}
    for i in range(3200):
        history = [*history, i]
        plan = planner.plan(SERDE, "k", "m", f"v{i:05}", history)
        base = plan.stored.base
        depth[plan.stored.version] = 0 if base is None else depth[base] + 1
        assert plan.remember is not None
        recent.put("k", plan.remember)
    assert max(depth.values()) == MAX_CHAIN
    restarts = [v for v, d in depth.items() if d == 0]
    assert restarts == ["v00000", "v03071"]  # 2333333 in base 4 would take 17 deltas


def test_values_that_are_not_lists_are_stored_whole_and_compressed() -> None:
    recent = RecentPayloads()
    plan = ValuePlanner(recent, compress=True).plan(SERDE, "k", "doc", "v1", "text " * 1000)
    assert plan.stored.codec == ZLIB_DICT
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
    chain = _chain_of(stored, "v003")  # 3 on 2 on 1 on 0
    everything = rebuild_all(chain)
    assert [SERDE.loads_typed(("msgpack", data)) for data in everything] == values[::-1]
    assert rebuild_all(chain[:2], below=everything[2]) == everything[:2]


class _Recording:
    """A serde that records the length of every list it is asked to serialise."""

    def __init__(self) -> None:
        self.lengths: list[int] = []

    def dumps_typed(self, obj: object) -> tuple[str, bytes]:
        if isinstance(obj, list):
            self.lengths.append(len(obj))
        return SERDE.dumps_typed(obj)

    def loads_typed(self, data: tuple[str, bytes]) -> object:
        return SERDE.loads_typed(data)


def _play(values: list[list[object]], serde: object = SERDE) -> dict[str, StoredValue]:
    recent = RecentPayloads()
    stored: dict[str, StoredValue] = {}
    for i, value in enumerate(values):
        plan = ValuePlanner(recent).plan(serde, "k", "messages", f"v{i:03}", value)  # type: ignore[arg-type]
        stored[plan.stored.version] = plan.stored
        assert plan.remember is not None
        recent.put("k", plan.remember)
    return stored


def test_an_append_around_the_same_objects_serialises_only_the_new_elements() -> None:
    history: list[object] = []
    values = []
    for i in range(30):  # as add_messages does: a new list around the same messages
        history = [*history, HumanMessage(f"question {i}?", id=f"h{i}")]
        values.append(history)
    serde = _Recording()
    stored = _play(values, serde)
    assert serde.lengths == [1] * 30  # the first list whole (one element), then one each
    for i, value in enumerate(values):
        assert SERDE.loads_typed(("msgpack", rebuild(_chain_of(stored, f"v{i:03}")))) == value


def test_equal_but_new_objects_are_compared_by_their_bytes() -> None:
    values = [[f"m{j}" for j in range(i + 1)] for i in range(5)]  # fresh objects each time
    serde = _Recording()
    stored = _play(values, serde)
    assert serde.lengths == [1, 2, 3, 4, 5]  # whole lists: no identity to go by
    assert [v.base is None for v in stored.values()] == [True, False, False, False, False]


def test_a_replaced_element_is_not_an_append() -> None:
    first = [HumanMessage("a", id="1"), HumanMessage("b", id="2")]
    second = [first[0], HumanMessage("B", id="2"), HumanMessage("c", id="3")]  # 2 replaced
    stored = _play([first, second])
    assert stored["v001"].base is None
    assert SERDE.loads_typed(("msgpack", rebuild([stored["v001"]]))) == second


@given(st.lists(st.tuples(st.sampled_from(["append", "copy", "replace"]), st.integers(0, 3))))
def test_any_sequence_of_changes_reads_back_exactly(steps: list[tuple[str, int]]) -> None:
    values: list[list[object]] = [["start"]]
    for kind, n in steps:
        last = values[-1]
        if kind == "append":  # the same objects, n more
            values.append([*last, *(f"e{len(last) + j}" for j in range(n))])
        elif kind == "copy":  # equal objects rebuilt, n more
            copies = [(x + ".")[:-1] if isinstance(x, str) else x for x in last]
            values.append([*copies, *["c"] * n])
        else:  # the last n replaced by new values
            values.append(last[: max(0, len(last) - n)] + [f"r{j}" for j in range(n)])
    stored = _play(values)
    for i, value in enumerate(values):
        chain = _chain_of(stored, f"v{i:03}")
        assert len(chain) <= MAX_CHAIN + 1
        assert SERDE.loads_typed(("msgpack", rebuild(chain))) == value


def test_a_delta_whose_base_changed_falls_back_to_the_whole_value() -> None:
    recent = RecentPayloads()
    planner = ValuePlanner(recent)
    history = ["a", "b"]
    recent.put("k", planner.plan(SERDE, "k", "m", "v1", history).remember)  # type: ignore[arg-type]
    plan = planner.plan(SERDE, "k", "m", "v2", [*history, "c"])
    assert plan.stored.codec == "append"
    assert plan.fallback is not None
    assert plan.fallback.base is None
    assert plan.fallback.crc == plan.stored.crc
    assert SERDE.loads_typed(("msgpack", rebuild([plan.fallback]))) == ["a", "b", "c"]
    assert plan.remember_fallback is not None
    assert plan.remember_fallback.path[-1].pos == 0  # what builds on it starts anew


@given(st.binary(max_size=300), st.binary(max_size=3000))
def test_crc_of_a_concatenation_is_combined_from_its_parts(a: bytes, b: bytes) -> None:
    assert crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)


@pytest.mark.parametrize("length", [1, 255, 256, 65_537, (1 << 21) - 1, 3_000_001])
def test_crc_combination_holds_for_lengths_of_many_bits(length: int) -> None:
    """Every operator a length's bits pick (their tables built on first use) is right."""
    a, b = b"head of the list", bytes(range(256)) * (length // 256) + b"x" * (length % 256)
    assert crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)


def test_messages_without_an_id_are_compared_by_their_bytes() -> None:
    # add_messages gives a message of its left side that has no id one, in place
    anonymous = HumanMessage("no id yet")
    first = [anonymous]
    serde = _Recording()
    recent = RecentPayloads()
    planner = ValuePlanner(recent)
    recent.put("k", planner.plan(serde, "k", "m", "v1", first).remember)  # type: ignore[arg-type]
    anonymous.id = "given-later"
    second = [anonymous, AIMessage("reply", id="r")]
    plan = planner.plan(serde, "k", "m", "v2", second)  # type: ignore[arg-type]
    assert serde.lengths == [1, 2]  # the whole list again: its first message changed
    assert SERDE.loads_typed(("msgpack", rebuild([plan.stored]))) == second
