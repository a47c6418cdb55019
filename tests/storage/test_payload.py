"""The exactness screen, id checks and metadata JSON shared by every backend, including the
fast paths: no value that serde would alter passes, and no exact value is refused."""

from __future__ import annotations

import dataclasses
import enum
import json
from typing import Any

import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage

from statekeeper._storage.deltas import RecentPayloads, ValuePlanner
from statekeeper._storage.payload import _scan, check_id, encode, safe_serde
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
