"""Append deltas on every backend: a put of a list serialises only what it appends — also
right after the thread was read, as LangGraph reads it at the start of every run — and
the list reads back exactly, in this process and in another saver."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, HumanMessage

from statekeeper.checkpointers import open_checkpointer
from tests.checkpointers.test_contract import cfg, put, values_at
from tests.conftest import Backend


class Recording:
    """A serde that records the length of every list it is asked to serialise."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.lengths: list[int] = []

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        if isinstance(obj, list):
            self.lengths.append(len(obj))
        return self.inner.dumps_typed(obj)  # type: ignore[no-any-return]

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        return self.inner.loads_typed(data)


def test_a_put_after_a_read_serialises_only_what_it_appends(
    saver: Any, url: str, backend: Backend
) -> None:
    history = [HumanMessage(f"question {i}?", id=f"h{i}") for i in range(30)]
    configs = [put(saver, "t", values={"messages": history})]
    for turn in range(3):  # a run: read the thread, append to what was read, store it
        read = saver.get_tuple(cfg("t"))
        assert read is not None
        grown = [
            *read.checkpoint["channel_values"]["messages"],
            AIMessage(f"a{turn}", id=f"a{turn}"),
        ]
        recording = Recording(saver.serde)
        saver.serde = recording
        try:
            configs.append(put(saver, "t", parent=configs[-1], values={"messages": grown}))
        finally:
            saver.serde = recording.inner
        assert recording.lengths == [1]  # the new message, never the 30 before it
    expected = [*history, *(AIMessage(f"a{t}", id=f"a{t}") for t in range(3))]
    assert values_at(saver, configs[-1])["messages"] == expected
    if backend.persistent:  # another saver rebuilds it from storage alone
        with open_checkpointer(url) as other:
            for count, config in enumerate(configs):
                assert values_at(other, config)["messages"] == expected[: 30 + count]


def test_a_list_changed_in_the_middle_after_a_read_is_stored_whole(saver: Any) -> None:
    history = [HumanMessage(f"question {i}?", id=f"h{i}") for i in range(10)]
    first = put(saver, "t", values={"messages": history})
    read = saver.get_tuple(cfg("t"))
    assert read is not None
    messages = list(read.checkpoint["channel_values"]["messages"])
    messages[3] = HumanMessage("replaced", id="h3")  # as add_messages replaces by id
    second = put(saver, "t", parent=first, values={"messages": messages})
    assert values_at(saver, second)["messages"] == messages
    assert values_at(saver, first)["messages"] == history


def test_values_compressed_without_the_dictionary_read_back_and_grow(
    saver: Any, url: str, backend: Backend, monkeypatch: Any
) -> None:
    """Storage written before the preset dictionary (codec ``zlib``, deltas
    ``append+zlib``) reads as it was, and new versions append to it."""
    import zlib

    from statekeeper._storage import deltas, payload

    def plain_zlib(data: bytes, *, compress: bool, min_bytes: int = 256) -> tuple[str, bytes]:
        if compress and len(data) >= min_bytes and len(packed := zlib.compress(data)) < len(data):
            return "zlib", packed
        return "", data

    text = "a sentence that repeats itself, as chat histories do. " * 20
    history = [HumanMessage(f"{text} {i}", id=f"h{i}") for i in range(20)]
    with monkeypatch.context() as old_release:
        old_release.setattr(payload, "pack", plain_zlib)
        old_release.setattr(deltas, "pack", plain_zlib)
        configs = [put(saver, "t", values={"messages": history[:10]})]
        configs.append(put(saver, "t", parent=configs[-1], values={"messages": history[:15]}))
    configs.append(put(saver, "t", parent=configs[-1], values={"messages": history}))
    savers = [saver]
    if backend.persistent:
        savers.append(open_checkpointer(url))
    try:
        for reader in savers:
            for count, config in zip((10, 15, 20), configs, strict=True):
                assert values_at(reader, config)["messages"] == history[:count]
    finally:
        for other in savers[1:]:
            other.close()
