"""The exactness screen, id checks and metadata JSON shared by every backend, including the
fast paths: no value that serde would alter passes, and no exact value is refused."""

from __future__ import annotations

import dataclasses
import enum
import json
from typing import Any

import ormsgpack
import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage

from statekeeper._storage.deltas import ValuePlanner
from statekeeper._storage.payload import MAX_DEPTH, _scan, check_id, decode, encode, safe_serde
from statekeeper._storage.remembered import RecentPayloads, Remembered
from statekeeper.backends.redis._client import pack
from statekeeper.backends.redis._layout import Layout, _framed, version_part
from statekeeper.checkpointers.semantics import dump_metadata
from statekeeper.errors import InvalidIdError, SerializationError

SERDE = safe_serde()


class Mood(enum.Enum):
    OK = "fine?"


@dataclasses.dataclass
class Note:
    text: str


@dataclasses.dataclass(slots=True)
class Slotted:
    items: list[str]


class Ticket(pydantic.BaseModel):
    title: str
    tags: list[str]


class Odd(enum.Enum):
    LONE = "odd\ud800"


# Each value, and where its error says the surrogate is (the path a user follows to find it).
BAD = [
    pytest.param("why?\ud800", "value", id="str"),
    pytest.param("why?\ud83d\ude00", "value", id="surrogate-pair-as-two-code-points"),
    pytest.param(
        ["ok?", {"deep": [("x", "\udfff")]}], "value[1]['deep'][0][1]", id="deep-in-containers"
    ),
    pytest.param({"k?\udc80": 1}, "value key 'k?\\udc80'", id="dict-key"),
    pytest.param(
        [HumanMessage("ok?"), AIMessage("fine? \ud800")], "value[1].content", id="message-content"
    ),
    pytest.param(
        [HumanMessage([{"type": "text", "text": "a?\ud800"}])],
        "value[0].content[0]['text']",
        id="message-content-block",
    ),
    pytest.param(
        [AIMessage("ok?", additional_kwargs={"x": ["\ud800"]})],
        "value[0].additional_kwargs['x'][0]",
        id="message-kwargs",
    ),
    pytest.param([HumanMessage("ok?", note="x\ud800")], "value[0].note", id="message-extra-field"),
    pytest.param([Ticket(title="ok?", tags=["\ud800"])], "value[0].tags[0]", id="model-field"),
    pytest.param([Note("ok?\ud800")], "value[0].text", id="dataclass"),
    pytest.param([Slotted(["ok?", "\ud800"])], "value[0].items[1]", id="slotted-dataclass"),
    pytest.param([Mood.OK, {"x": "\ud800"}], "value[1]['x']", id="next-to-an-enum"),
    pytest.param([Mood.OK, Odd.LONE], "value[1].value", id="enum-value"),
]


@pytest.mark.parametrize(("bad", "where"), BAD)
def test_a_surrogate_anywhere_raises_instead_of_being_stored_as_a_question_mark(
    bad: Any, where: str
) -> None:
    with pytest.raises(SerializationError, match="surrogate") as info:
        encode(SERDE, bad, compress=True)
    assert f"the string at {where} contains a lone surrogate" in str(info.value)


GOOD = [
    pytest.param("why? é ü 漢字 😀 \x00", id="str"),
    pytest.param(["ok?", {"k?": ["x?", b"?\xff", 1, 2.5, None, True]}], id="containers"),
    pytest.param([HumanMessage("ok? 😀"), AIMessage("fine? é", id="run-1")], id="messages"),
    pytest.param([HumanMessage("ok?", note="é?")], id="message-extra-field"),
    pytest.param([Ticket(title="ok?", tags=["é?"])], id="model"),
    pytest.param([Note("ok? 😀"), Mood.OK], id="dataclass-and-enum"),
    pytest.param([Slotted(["ok?"]), Slotted(["é?"])], id="slotted-dataclasses"),
]


@pytest.mark.parametrize("good", GOOD)
def test_exact_values_with_question_marks_and_non_ascii_text_are_stored(good: Any) -> None:
    type_, codec, data = encode(SERDE, good, compress=False)
    assert codec == ""
    assert SERDE.loads_typed((type_, data)) == good


@pytest.mark.timeout(10)
def test_enum_members_are_screened_by_value_without_walking_their_class() -> None:
    shared = ["ok?"] * 50
    value = [Mood.OK, {"a": shared, "b": shared, "c": [shared] * 50}, Note("x?")]
    type_, _, data = encode(SERDE, value, compress=False)
    assert SERDE.loads_typed((type_, data))[0] is Mood.OK


@given(st.text(), st.lists(st.text(), max_size=4))
def test_text_round_trips_exactly_or_raises(text: str, more: list[str]) -> None:
    value = [text, {"m": HumanMessage(text + "?")}, *more]
    try:
        type_, _, data = encode(SERDE, value, compress=False)
    except SerializationError:
        assert any(0xD800 <= ord(c) <= 0xDFFF for s in [text, *more] for c in s)
        return
    assert SERDE.loads_typed((type_, data)) == value


def test_scan_answers_for_plain_data_and_models_and_defers_on_other_objects() -> None:
    assert _scan([HumanMessage("ok? é"), {"k": (1, 2.0, b"x", None)}]) is False
    assert _scan([HumanMessage("ok?", note=["\ud800"])]) is True
    assert _scan({"a": ["b", "\udfff"]}) is True
    assert _scan([Note("x")]) is None
    assert _scan([Mood.OK]) is None
    assert _scan({"x": {1, 2}}) is None


def _delta_plan(previous: list[Any], new: list[Any]) -> None:
    recent = RecentPayloads()
    first = ValuePlanner(recent).plan(SERDE, "k", "messages", "v1", previous)
    assert first.remember is not None
    recent.put("k", first.remember)
    second = ValuePlanner(recent).plan(SERDE, "k", "messages", "v2", new)
    assert second.stored.codec == "append"  # the appended message was screened as a delta


def test_a_lone_surrogate_deep_inside_an_appended_message_raises() -> None:
    history = [HumanMessage("hello?", id="1"), AIMessage("hi? what now?", id="2")]
    _delta_plan(history, [*history, HumanMessage("fine?", id="3")])
    deep = [
        AIMessage("ok?", id="3", response_metadata={"a": [{"b": ("c", "x\ud800")}]}),
        HumanMessage([{"type": "text", "text": "q?"}, {"type": "text", "text": "\udc00"}]),
        HumanMessage("ok?", id="3", extra={"nested": "\ud800"}),
    ]
    for message in deep:
        with pytest.raises(SerializationError, match="surrogate"):
            _delta_plan(history, [*history, message])


def test_check_id_fast_path_keeps_every_rule() -> None:
    assert check_id("thread-1", "thread_id") == "thread-1"
    assert check_id("", "checkpoint_ns", allow_empty=True) == ""
    assert check_id("é 😀", "thread_id") == "é 😀"
    assert check_id(7, "thread_id") == "7"
    with pytest.raises(InvalidIdError, match="must not be empty"):
        check_id("", "thread_id")
    with pytest.raises(InvalidIdError, match="lone surrogate"):
        check_id("a\ud800", "thread_id")
    with pytest.raises(InvalidIdError, match="must be a string"):
        check_id(True, "thread_id")


def test_metadata_json_is_canonical_as_before() -> None:
    metadata = {"b": 1, "a": "é\ud800\x00", "c": [1.5, None, True], "d": {"z": 1, "y": "q?"}}
    expected = json.dumps(metadata, sort_keys=True, ensure_ascii=True, allow_nan=False)
    assert dump_metadata(metadata) == expected
    with pytest.raises(SerializationError):
        dump_metadata({"x": float("nan")})
    with pytest.raises(SerializationError):
        dump_metadata({"x": object()})


def test_framing_matches_the_redis_pack_format() -> None:
    parts = (b"", b"abc", b"1:2", b"\x00\x01" * 40)
    assert _framed(parts, b"tail") == pack(*parts) + b"tail"
    assert _framed((), b"") == b""


def test_value_fields_are_kept_per_exact_version_and_bad_channels_always_raise() -> None:
    layout = Layout("p", 0, False, True, False)
    ens = b"\x00\x01"
    by_int = layout.value_field("", ens, "ch", 1)
    by_float = layout.value_field("", ens, "ch", 1.0)
    by_text = layout.value_field("", ens, "ch", "1")
    assert len({by_int, by_float, by_text}) == 3
    assert by_int.endswith(version_part(1))
    assert by_float.endswith(version_part(1.0))
    assert layout.value_field("", ens, "ch", "1") is by_text
    for _ in range(2):
        with pytest.raises(InvalidIdError):
            layout.value_field("", ens, "a\ud800", "1")
        with pytest.raises(InvalidIdError):
            layout.value_field("", ens, True, "1")


# -- values that LangGraph's msgpack would lose silently, and values nested too deeply ---


class Holder(pydantic.BaseModel):
    value: Any


def nested_lists(depth: int, leaf: Any = "x") -> Any:
    for _ in range(depth):
        leaf = [leaf]
    return leaf


def nested_dicts(depth: int, leaf: Any = "x") -> Any:
    for _ in range(depth):
        leaf = {"k": leaf}
    return leaf


UNKNOWN_EXTENSIONS = [
    pytest.param([1, ormsgpack.Ext(42, b"x")], "code 42", id="in-a-list"),
    pytest.param({"deep": {"er": ormsgpack.Ext(120, b"")}}, "code 120", id="in-a-dict"),
    pytest.param(Holder(value=ormsgpack.Ext(99, b"")), "code 99", id="in-a-model's-field"),
    pytest.param(
        {"a": ormsgpack.Ext(3, b"garbage")}, "code 3 that is not an object", id="bad-data"
    ),
]


@pytest.mark.parametrize(("value", "what"), UNKNOWN_EXTENSIONS)
def test_a_value_holding_an_unknown_msgpack_extension_is_refused_on_write(
    value: Any, what: str
) -> None:
    with pytest.raises(SerializationError, match=f"holds an msgpack extension .*{what}"):
        encode(SERDE, value, compress=False)


def _model_bytes(fields: dict[str, Any]) -> bytes:
    """What LangGraph writes for a pydantic model with ``fields``, built by hand so that
    the fields may hold what no write makes."""
    parts = [Holder.__module__, "Holder", fields, "model_validate_json"]
    return ormsgpack.packb(ormsgpack.Ext(5, ormsgpack.packb(parts)))


STORED_UNKNOWN = [
    pytest.param(ormsgpack.packb([1, ormsgpack.Ext(42, b"xyz")]), "code 42", id="top-level"),
    pytest.param(_model_bytes({"value": ormsgpack.Ext(99, b"")}), "code 99", id="in-an-object"),
    pytest.param(
        ormsgpack.packb({"a": ormsgpack.Ext(3, b"garbage")}), r"\(code 3\)", id="bad-data"
    ),
]


@pytest.mark.parametrize(("data", "what"), STORED_UNKNOWN)
def test_stored_bytes_with_an_unknown_msgpack_extension_are_refused_on_read(
    data: bytes, what: str
) -> None:
    # LangGraph's own decoder reads each of these with None in the value's place
    with pytest.raises(SerializationError, match=f"holds .*{what}.* refused rather than read"):
        decode(SERDE, "msgpack", "", data)


@pytest.mark.parametrize("nest", [nested_lists, nested_dicts], ids=["lists", "dicts"])
def test_a_value_nested_deeper_than_the_limit_is_refused_on_write_and_on_read(nest: Any) -> None:
    deepest = nest(MAX_DEPTH)
    type_, codec, data = encode(SERDE, deepest, compress=False)
    assert decode(SERDE, type_, codec, data) == deepest  # the limit itself round-trips
    for depth in (MAX_DEPTH + 1, 900):
        with pytest.raises(SerializationError, match=f"nested deeper than {MAX_DEPTH} levels"):
            encode(SERDE, nest(depth), compress=False)
    # bytes no write makes: a value 900 deep, as ormsgpack would read it whole
    too_deep = {nested_lists: b"\x91" * 900 + b"\x90", nested_dicts: b"\x81\xa1k" * 900 + b"\x90"}
    with pytest.raises(SerializationError, match=f"nested deeper than {MAX_DEPTH} levels"):
        decode(SERDE, "msgpack", "", too_deep[nest])
    # also when a checkpointer reads them: only the bytes it wrote itself go unchecked
    recent = RecentPayloads()
    recent.put("k", Remembered.whole("v1", too_deep[nest][:1] + b"\x90", 0, None))
    with pytest.raises(SerializationError, match=f"nested deeper than {MAX_DEPTH} levels"):
        recent.load(SERDE, "k", "msgpack", too_deep[nest])


def test_depth_is_counted_from_each_object_as_on_write() -> None:
    # each object's fields are encoded apart, with a depth of their own
    value = nested_lists(200, Holder(value=nested_lists(200)))
    type_, codec, data = encode(SERDE, value, compress=True)
    assert decode(SERDE, type_, codec, data) == value
    # but bytes with a field deeper than any write makes are refused
    # {"value": [[[...]]]} 300 deep, inside the model's parts, assembled byte by byte
    fields = b"\x81" + ormsgpack.packb("value") + b"\x91" * 300 + b"\x90"
    parts = b"\x94" + ormsgpack.packb(Holder.__module__) + ormsgpack.packb("Holder")
    parts += fields + ormsgpack.packb("model_validate_json")
    data = b"\xc9" + len(parts).to_bytes(4, "big") + b"\x05" + parts
    with pytest.raises(SerializationError, match=f"nested deeper than {MAX_DEPTH} levels"):
        decode(SERDE, "msgpack", "", data)


def test_deep_metadata_is_a_serialization_error_not_a_recursion_error() -> None:
    with pytest.raises(SerializationError, match="must be JSON"):
        dump_metadata({"x": nested_dicts(5000)})


def test_every_backend_refuses_to_store_an_unknown_extension_and_stores_nothing(
    saver: Any,
) -> None:
    from langgraph.checkpoint.base import empty_checkpoint

    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}

    def put(value: Any, parent: Any = None) -> Any:
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"v": value}
        checkpoint["channel_versions"] = {"v": saver.get_next_version(None)}
        return saver.put(parent or config, checkpoint, {}, checkpoint["channel_versions"])

    for bad in ([ormsgpack.Ext(42, b"x")], {"a": nested_lists(900)}):
        with pytest.raises(SerializationError, match=r"code 42|nested deeper"):
            put(bad)
        assert saver.get_tuple(config) is None
    first = put(["a", "b"])
    # appended to a stored list: only the new items are encoded (an append delta)
    with pytest.raises(SerializationError, match="code 42"):
        put(["a", "b", "c", Holder(value=ormsgpack.Ext(42, b""))], first)
    assert saver.get_tuple(config).checkpoint["channel_values"] == {"v": ["a", "b"]}
    with pytest.raises(SerializationError, match="code 77"):
        saver.put_writes(first, [("v", ormsgpack.Ext(77, b""))], "task")
    assert saver.get_tuple(config).pending_writes == []


@given(st.binary(min_size=0, max_size=70_000), st.booleans())
def test_payloads_round_trip_compressed_or_not(data: bytes, repetitive: bool) -> None:
    from statekeeper._storage.payload import ZLIB_DICT, unpack
    from statekeeper._storage.payload import pack as pack_payload

    if repetitive:
        data = (data[:50] or b"x") * 300
    for compress in (True, False):
        codec, stored = pack_payload(data, compress=compress)
        assert codec in ((ZLIB_DICT, "") if compress else ("",))
        assert unpack(codec, stored) == data
        assert len(stored) <= len(data)


def test_only_payloads_of_min_bytes_and_more_are_compressed() -> None:
    from statekeeper._storage.payload import COMPRESS_MIN_BYTES, ZLIB_DICT
    from statekeeper._storage.payload import pack as pack_payload

    small, large = b"ab" * (COMPRESS_MIN_BYTES // 2), b"ab" * 2048
    assert pack_payload(small[:-1], compress=True)[0] == ""
    assert pack_payload(small, compress=True)[0] == ZLIB_DICT
    assert pack_payload(small, compress=True, min_bytes=4096)[0] == ""
    assert pack_payload(large, compress=True, min_bytes=4096)[0] == ZLIB_DICT
    assert pack_payload(large, compress=False, min_bytes=4096)[0] == ""


def test_the_preset_dictionary_is_frozen() -> None:
    """Every payload stored with ``zlib+d1`` needs these exact bytes to be read again: a
    change to the dictionary must come with a new codec name, never in place."""
    import hashlib

    from statekeeper._storage import payload

    assert hashlib.sha256(payload._DICTIONARY_1).hexdigest() == (
        "0136d38827c5becb195a891b755482eb48ea66b4dc341a37c77cb5b48086695c"
    )


def test_payloads_compressed_without_the_dictionary_still_read() -> None:
    """What earlier releases stored (codec ``zlib``) reads back as it was written."""
    import zlib

    from statekeeper._storage.payload import unpack

    data = b"content additional_kwargs response_metadata " * 40
    assert unpack("zlib", zlib.compress(data)) == data


def test_the_dictionary_makes_chat_messages_smaller() -> None:
    import zlib

    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    from statekeeper._storage.payload import ZLIB_DICT
    from statekeeper._storage.payload import pack as pack_payload

    text = " ".join(f"token{i % 53} of reply {i}" for i in range(60))
    _, data = JsonPlusSerializer().dumps_typed([AIMessage(text, id="run-1")])
    codec, stored = pack_payload(data, compress=True)
    assert codec == ZLIB_DICT
    assert len(stored) < len(zlib.compress(data, 3))


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b[:-4],  # cut short
        lambda b: b + b"\x00",  # bytes after the end of the stream
        lambda b: b[:10] + bytes([b[10] ^ 0xFF]) + b[11:],  # a flipped byte
    ],
    ids=["truncated", "padded", "flipped"],
)
def test_damaged_dictionary_payloads_raise_serialization_error(damage: Any) -> None:
    from statekeeper._storage.payload import ZLIB_DICT, unpack
    from statekeeper._storage.payload import pack as pack_payload

    data = b"content additional_kwargs response_metadata " * 40
    codec, stored = pack_payload(data, compress=True)
    assert codec == ZLIB_DICT
    with pytest.raises(SerializationError, match="corrupt"):
        unpack(codec, damage(stored))
    with pytest.raises(SerializationError, match="corrupt"):  # read without the dictionary
        unpack("zlib", stored)
