"""``statekeeper.refs``: every syntax of a checkpoint reference, resolved on every backend
of the shared list, on a thread whose history has branches (forks in place made with
``update_state``, as a human's edit is)."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterable, Iterator
from typing import Any, TypedDict

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import END, START, StateGraph

from statekeeper.errors import (
    AmbiguousReferenceError,
    CorruptCheckpointError,
    InvalidIdError,
    ThreadNotFoundError,
)
from statekeeper.refs import (
    MAX_REF,
    MIN_PREFIX,
    readable_checkpoints,
    resolve_checkpoint,
    short_ids,
)

NODES = ("a", "b", "c", "d")


class Steps(TypedDict, total=False):
    seen: str


def _graph(saver: Any) -> Any:
    builder = StateGraph(Steps)
    for name in NODES:
        builder.add_node(name, lambda state, name=name: {"seen": name})
    builder.add_edge(START, NODES[0])
    for before, after in itertools.pairwise(NODES):
        builder.add_edge(before, after)
    builder.add_edge(NODES[-1], END)
    return builder.compile(checkpointer=saver)


def _ids(saver: Any, thread_id: str = "t") -> dict[int, list[str]]:
    """The thread's checkpoint ids by step, oldest first within a step."""
    found: dict[int, list[str]] = {}
    for tup in saver.list({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}):
        found.setdefault(tup.metadata["step"], []).append(tup.checkpoint["id"])
    return {step: sorted(ids) for step, ids in found.items()}


@pytest.fixture
def thread(saver: Any) -> dict[str, Any]:
    """Thread ``t``: steps -1..4, then a fork at step 2 (a second step 3, off the branch
    later) and a fork at step 0 (a second step 1, now the head)."""
    graph = _graph(saver)
    config = {"configurable": {"thread_id": "t"}}
    graph.invoke({}, config)
    original = {step: ids[0] for step, ids in _ids(saver).items()}
    at = {"configurable": {"thread_id": "t", "checkpoint_id": original[2]}}
    graph.update_state(at, {"seen": "edited at 2"})
    at = {"configurable": {"thread_id": "t", "checkpoint_id": original[0]}}
    graph.update_state(at, {"seen": "edited at 0"})
    ids = _ids(saver)
    forked_3 = next(i for i in ids[3] if i != original[3])
    head = next(i for i in ids[1] if i != original[1])
    return {"original": original, "forked_3": forked_3, "head": head}


def _resolve(saver: Any, ref: str, thread_id: str = "t") -> str:
    return str(resolve_checkpoint(saver, thread_id, ref).checkpoint["id"])


def test_an_exact_id_and_every_short_id(saver: Any, thread: dict[str, Any]) -> None:
    every = [i for ids in _ids(saver).values() for i in ids]
    for full, short in short_ids(every).items():
        assert _resolve(saver, full) == full
        assert _resolve(saver, short) == full
        assert len(short) < len(full)


def test_an_ambiguous_prefix_lists_its_candidates(saver: Any, thread: dict[str, Any]) -> None:
    first, second = thread["original"][-1], thread["original"][0]
    shared = next(
        first[:length] for length in range(len(first), 0, -1) if second.startswith(first[:length])
    )
    assert len(shared) >= MIN_PREFIX  # ids that grow with time share their start
    with pytest.raises(AmbiguousReferenceError, match="is ambiguous") as caught:
        _resolve(saver, shared)
    assert {first, second} <= set(caught.value.candidates)
    assert caught.value.reference == shared
    assert "\n" not in str(caught.value)
    assert "(step -1)" in str(caught.value) or len(caught.value.candidates) > 5


def test_a_step_means_the_current_branch(saver: Any, thread: dict[str, Any]) -> None:
    original = thread["original"]
    assert _resolve(saver, "@-1") == original[-1]
    assert _resolve(saver, "@0") == original[0]
    assert _resolve(saver, "@1") == thread["head"]  # the fork, on the current branch
    assert _resolve(saver, "@4") == original[4]  # off the branch, but the only step 4
    with pytest.raises(AmbiguousReferenceError, match="none on the current branch") as caught:
        _resolve(saver, "@3")
    assert set(caught.value.candidates) == {original[3], thread["forked_3"]}
    with pytest.raises(ThreadNotFoundError, match="no checkpoint at step 9") as missing:
        _resolve(saver, "@9")
    assert (missing.value.thread_id, missing.value.checkpoint_id) == ("t", "@9")
    assert missing.value.reason == "no checkpoint at step 9; the thread has steps -1 to 4"


def test_head_and_ancestors(saver: Any, thread: dict[str, Any]) -> None:
    original, head = thread["original"], thread["head"]
    for ref in ("head", "latest", "HEAD", "~0", "head~0"):
        assert _resolve(saver, ref) == head
    for ref in ("~", "~1", "head~1", "latest~"):
        assert _resolve(saver, ref) == original[0]
    assert _resolve(saver, "~2") == original[-1]
    assert _resolve(saver, "head~1~1") == original[-1]
    assert _resolve(saver, "@4~2") == original[2]
    assert _resolve(saver, f"{original[3]}~1") == original[2]
    assert _resolve(saver, f"{thread['forked_3']}~") == original[2]
    with pytest.raises(ThreadNotFoundError, match="has no parent") as caught:
        _resolve(saver, "~3")
    assert caught.value.checkpoint_id == "~3"


def test_an_unknown_thread_or_id(saver: Any, thread: dict[str, Any]) -> None:
    for ref in ("head", "@0", "~1", "1f0000000", thread["head"]):
        with pytest.raises(ThreadNotFoundError) as caught:
            _resolve(saver, ref, thread_id="nope")
        assert (caught.value.thread_id, caught.value.checkpoint_id) == ("nope", None)
    with pytest.raises(ThreadNotFoundError, match="no checkpoint id starts with it") as found:
        _resolve(saver, "ffff-not-an-id")
    assert found.value.checkpoint_id == "ffff-not-an-id"
    with pytest.raises(ThreadNotFoundError):
        resolve_checkpoint(saver, "t", "head", ns="no-such-namespace")


@pytest.mark.parametrize(
    ("ref", "says"),
    [
        ("", "non-empty"),
        ("abc", "too short"),
        ("x" * (MAX_REF + 1), f"at most {MAX_REF} characters"),
        ("1f1e\x1b[2J", "control characters"),
        ("@\u202e1", "control characters"),
        ("1f1e\ud800", "lone surrogate"),
        ("@", "a step is @"),
        ("@one", "a step is @"),
        ("@" + "9" * 40, "the step is out of range"),
        ("head~x", "only ~N may follow"),
        ("~1~-2", "only ~N may follow"),
        ("~" + "9" * 12, "the count after ~ is too large"),
    ],
)
def test_what_is_not_a_reference(saver: Any, thread: dict[str, Any], ref: str, says: str) -> None:
    with pytest.raises(InvalidIdError, match=says) as caught:
        _resolve(saver, ref)
    assert not isinstance(caught.value, AmbiguousReferenceError)
    assert len(str(caught.value)) < 200  # a hostile reference is not repeated whole


def test_any_stored_id_is_tried_first(saver: Any) -> None:
    """An id that reads like a reference (``~``, ``@``, control characters) names
    itself."""
    config = {"configurable": {"thread_id": "odd", "checkpoint_ns": ""}}
    for odd in ("a~1", "@3", "head", "x\x1by"):
        checkpoint = {**empty_checkpoint(), "id": odd}
        config = saver.put(config, checkpoint, {"step": 0}, {})
        assert _resolve(saver, odd, thread_id="odd") == odd


def test_short_ids_are_unique_prefixes() -> None:
    ids = ["1f1ef151-7773-6a53", "1f1ef151-7808-6f37", "1f1ef151-7833-63ec", "abc"]
    assert short_ids(ids) == {
        "1f1ef151-7773-6a53": "1f1ef151-777",
        "1f1ef151-7808-6f37": "1f1ef151-780",
        "1f1ef151-7833-63ec": "1f1ef151-783",
        "abc": "abc",
    }
    # a cut never ends on "-": one more character is shown
    assert short_ids(["12345678-aa", "12345678xbb"]) == {
        "12345678-aa": "12345678-a",
        "12345678xbb": "12345678x",
    }
    assert short_ids(["0123456789abcdef"]) == {"0123456789abcdef": "01234567"}
    assert short_ids([], minimum=2) == {}
    assert short_ids(["abcdefgh"], minimum=2) == {"abcdefgh": "abcd"}  # never under 4


@contextlib.contextmanager
def _damaged(tmp_path: Any, steps: Iterable[int]) -> Iterator[tuple[Any, dict[int, str]]]:
    """A SQLite saver holding thread ``t`` (steps -1..4) whose checkpoints at ``steps``
    are garbage; and its checkpoint ids by step."""
    import sqlite3

    from statekeeper.checkpointers import open_checkpointer

    path = tmp_path / "state.db"
    with open_checkpointer(f"sqlite:///{path}") as saver:
        _graph(saver).invoke({}, {"configurable": {"thread_id": "t"}})
        ids = {step: found[0] for step, found in _ids(saver).items()}
        with sqlite3.connect(path) as conn:
            conn.executemany(
                "UPDATE checkpoints SET checkpoint = X'c1c1c1c1' WHERE checkpoint_id = ?",
                [(ids[step],) for step in steps],
            )
        conn.close()
        yield saver, ids


def test_references_and_listings_go_past_a_damaged_checkpoint(tmp_path: Any) -> None:
    """One damaged checkpoint in the middle of a SQLite thread: ``readable_checkpoints``
    lists every other one and names the damaged one, a step or prefix reference to
    another checkpoint resolves, and the damaged one by its id raises its damage."""
    with _damaged(tmp_path, [2]) as (saver, ids):
        config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        with pytest.raises(CorruptCheckpointError):
            list(saver.list(config))
        listed, damaged = readable_checkpoints(saver, config)
        assert [t.checkpoint["id"] for t in listed] == [ids[s] for s in (4, 3, 1, 0, -1)]
        assert [d.checkpoint_id for d in damaged] == [ids[2]]
        assert resolve_checkpoint(saver, "t", "@1").checkpoint["id"] == ids[1]
        assert resolve_checkpoint(saver, "t", ids[0][:-4]).checkpoint["id"] == ids[0]
        with pytest.raises(ThreadNotFoundError):
            resolve_checkpoint(saver, "t", "@2")  # damaged: no readable checkpoint there
        with pytest.raises(CorruptCheckpointError):
            resolve_checkpoint(saver, "t", ids[2])


def test_a_reference_that_finds_nothing_readable_says_what_is_damaged(tmp_path: Any) -> None:
    """Every checkpoint after the input damaged: a step says it found none among the
    readable ones and that some cannot be read; a prefix of a damaged id raises its
    damage, not "no such checkpoint"."""
    with _damaged(tmp_path, range(5)) as (saver, ids):
        with pytest.raises(ThreadNotFoundError, match="5 checkpoints that cannot be read"):
            resolve_checkpoint(saver, "t", "@1")
        with pytest.raises(CorruptCheckpointError) as raised:
            resolve_checkpoint(saver, "t", ids[2][:-3])
        assert raised.value.checkpoint_id == ids[2]
