"""PostgreSQL: damage to the stored rows is never silent.

A schema written by a chat graph (values stored whole and as append deltas, pending
writes of an interrupted step) is damaged, one trial at a time, by one SQL statement run
behind the checkpointer's back (a flipped byte in each kind of stored record, a changed
id, version or count, a deleted row of each table), and read back whole: every thread's
newest checkpoint, its full history, every checkpoint's writes, the graph's state and
the global listing. A read must return exactly what was stored or raise a
``CorruptCheckpointError``; ``verify()`` must report the damage; and ``verify(repair=True)``
rebuilds what can be rebuilt (head records, writes digests) so that reads work again.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

from statekeeper.checkpointers import open_checkpointer
from statekeeper.errors import CorruptCheckpointError
from tests.postgres_servers import POSTGRES, connect

THREADS = ("chat-0", "chat-1")


class Chat(TypedDict):
    messages: Annotated[list[str], operator.add]
    topic: str
    turns: int


def _graph(saver: Any) -> Any:
    def reply(state: Chat) -> dict[str, Any]:
        return {"messages": [f"reply {state['turns']} " + "w" * 30], "turns": state["turns"] + 1}

    def ask(state: Chat) -> dict[str, Any]:
        if state["turns"] >= 3:  # the last turn stops here: its writes are pending
            return {"messages": [f"answer {interrupt('go on?')}"]}
        return {}

    builder = StateGraph(Chat)
    builder.add_node("reply", reply)
    builder.add_node("ask", ask)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", "ask")
    builder.add_edge("ask", END)
    return builder.compile(checkpointer=saver)


def _config(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


def _read_all(saver: Any) -> dict[str, Any]:
    """Everything a user can read, as plain data."""
    graph = _graph(saver)
    seen: dict[str, Any] = {}
    for thread_id in THREADS:
        newest = saver.get_tuple(_config(thread_id))
        history = list(saver.list(_config(thread_id)))
        seen[thread_id] = {
            "newest": None if newest is None else (newest.checkpoint, newest.metadata),
            "history": [(t.checkpoint, t.metadata, t.pending_writes) for t in history],
            "writes": [saver.get_writes(t.config) for t in history],
            "state": graph.get_state(_config(thread_id)).values,
        }
    seen["all"] = [t.config for t in saver.list(None)]
    return seen


# One statement each, run in the test's schema; `{one}` picks the row to damage.
DAMAGES = {
    "checkpoint-payload-byte": "UPDATE checkpoints SET checkpoint = set_byte(checkpoint, 6,"
    " get_byte(checkpoint, 6) # 1) WHERE checkpoint_id = (SELECT checkpoint_id FROM"
    " checkpoints ORDER BY checkpoint_id LIMIT 1 OFFSET 3)",
    "metadata-text": "UPDATE checkpoints SET metadata = replace(metadata, '\"step\"', '\"stop\"')"
    " WHERE checkpoint_id = (SELECT max(checkpoint_id) FROM checkpoints)",
    "parent-id": "UPDATE checkpoints SET parent_id = parent_id || 'x' WHERE checkpoint_id ="
    " (SELECT checkpoint_id FROM checkpoints WHERE parent_id IS NOT NULL LIMIT 1)",
    "channel-version": "UPDATE checkpoints SET versions[1] = versions[1] || '0' WHERE"
    " checkpoint_id = (SELECT max(checkpoint_id) FROM checkpoints)",
    "values-count": "UPDATE checkpoints SET values_count = values_count + 1 WHERE"
    " checkpoint_id = (SELECT max(checkpoint_id) FROM checkpoints)",
    "full-value-byte": "UPDATE blobs SET blob = set_byte(blob, length(blob) - 1,"
    " get_byte(blob, length(blob) - 1) # 1) WHERE (channel, version) = (SELECT channel, version"
    " FROM blobs WHERE codec <> 'append' AND type <> 'empty' AND channel = 'messages' LIMIT 1)",
    "delta-byte": "UPDATE blobs SET blob = set_byte(blob, length(blob) - 1,"
    " get_byte(blob, length(blob) - 1) # 1) WHERE codec = 'append' AND (thread_id, version) ="
    " (SELECT thread_id, max(version) FROM blobs WHERE codec = 'append' GROUP BY thread_id"
    " LIMIT 1)",
    "value-crc": "UPDATE blobs SET crc = crc + 1 WHERE (thread_id, channel, version) = (SELECT"
    " thread_id, channel, max(version) FROM blobs WHERE type <> 'empty' GROUP BY thread_id,"
    " channel LIMIT 1)",
    "write-value-byte": "UPDATE writes SET value = set_byte(value, 0, get_byte(value, 0) # 1)"
    " WHERE (checkpoint_id, task_id, idx) = (SELECT checkpoint_id, task_id, idx FROM writes"
    " LIMIT 1)",
    "write-channel": "UPDATE writes SET channel = channel || 'x' WHERE (checkpoint_id, task_id,"
    " idx) = (SELECT checkpoint_id, task_id, idx FROM writes LIMIT 1)",
    "lost-value-row": "DELETE FROM blobs WHERE (thread_id, channel, version) = (SELECT thread_id,"
    " channel, max(version) FROM blobs WHERE channel = 'topic' GROUP BY thread_id, channel"
    " LIMIT 1)",
    "lost-write-row": "DELETE FROM writes WHERE (checkpoint_id, task_id, idx) = (SELECT"
    " checkpoint_id, task_id, idx FROM writes LIMIT 1)",
    "lost-newest-checkpoint": "DELETE FROM checkpoints WHERE checkpoint_id = (SELECT"
    " max(checkpoint_id) FROM checkpoints)",
    "lost-older-checkpoint": "DELETE FROM checkpoints WHERE checkpoint_id = (SELECT"
    " checkpoint_id FROM checkpoints ORDER BY checkpoint_id LIMIT 1 OFFSET 2)",
    "head-count": "UPDATE heads SET checkpoint_count = checkpoint_count + 1"
    " WHERE thread_id = 'chat-1'",
    "head-newest": "UPDATE heads SET newest_id = newest_id || 'x' WHERE thread_id = 'chat-0'",
    "lost-head": "DELETE FROM heads WHERE thread_id = 'chat-0'",
    "writes-count": "UPDATE write_counts SET writes_count = writes_count - 1 WHERE"
    " checkpoint_id = (SELECT checkpoint_id FROM writes LIMIT 1)",
    "lost-writes-count": "DELETE FROM write_counts WHERE checkpoint_id = (SELECT checkpoint_id"
    " FROM writes LIMIT 1)",
}
# What verify(repair=True) rebuilds, after which every read returns what was stored.
REPAIRABLE = {"head-count", "head-newest", "lost-head", "writes-count"}


@pytest.fixture(scope="module")
def written() -> Iterator[tuple[str, dict[str, Any]]]:
    """A schema the chat graph wrote, and everything read from it before any damage."""
    url = POSTGRES.url()
    with open_checkpointer(url) as saver:
        graph = _graph(saver)
        for thread_id in THREADS:
            graph.invoke({"messages": ["hi"], "topic": "weather", "turns": 0}, _config(thread_id))
            for turn in range(3):
                graph.invoke({"messages": [f"more {turn}"]}, _config(thread_id))
        truth = _read_all(saver)
    yield url, truth
    POSTGRES.cleanup(url)


@pytest.fixture
def damaged(written: tuple[str, dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    """A copy of the written schema for one trial (so trials never see each other's damage)."""
    url, truth = written
    copy = POSTGRES.url()
    open_checkpointer(copy).close()  # creates the tables; the rows are copied as they are
    with connect(url) as conn:
        schema = _schema(url)
        target_schema = _schema(copy)
        for table in ("checkpoints", "blobs", "writes", "write_counts", "heads"):
            conn.execute(f'INSERT INTO "{target_schema}".{table} SELECT * FROM "{schema}".{table}')
    yield copy, truth
    POSTGRES.cleanup(copy)


def _schema(url: str) -> str:
    return url.rsplit("schema=", 1)[1]


def _damage(url: str, statement: str) -> None:
    with connect(url) as conn:
        conn.execute(f'SET search_path TO "{_schema(url)}"')
        assert conn.execute(statement).rowcount >= 1, statement  # type: ignore[union-attr]


@pytest.mark.parametrize("name", sorted(DAMAGES))
def test_damage_is_found_by_reads_and_verify(
    damaged: tuple[str, dict[str, Any]], name: str
) -> None:
    url, truth = damaged
    with open_checkpointer(url) as saver:
        assert saver.verify() == []
        assert _read_all(saver) == truth
    _damage(url, DAMAGES[name])
    with open_checkpointer(url) as saver:
        found = saver.verify()
        assert found, f"verify() missed {name}"
        assert all(d.backend == "postgres" for d in found)
        try:
            seen = _read_all(saver)
        except CorruptCheckpointError:
            pass  # any other error fails the test
        else:
            assert seen == truth, f"{name}: a read returned something else than was stored"
        if name in REPAIRABLE:
            saver.verify(repair=True)
            assert saver.verify() == []
            assert _read_all(saver) == truth


def test_fallback_serves_the_newest_intact_checkpoint(damaged: tuple[str, dict[str, Any]]) -> None:
    url, truth = damaged
    _damage(url, DAMAGES["metadata-text"])
    with open_checkpointer(url) as saver, pytest.raises(CorruptCheckpointError):
        saver.get_tuple(_config(_newest_thread(saver, url)))
    with open_checkpointer(url, on_corrupt="fallback") as saver:
        thread_id = _newest_thread(saver, url)
        older = saver.get_tuple(_config(thread_id))
        assert older is not None
        assert older.checkpoint in [c for c, _, _ in truth[thread_id]["history"]][1:]


def _newest_thread(saver: Any, url: str) -> str:
    with connect(url) as conn:
        row = conn.execute(
            f'SELECT thread_id FROM "{_schema(url)}".heads ORDER BY newest_id DESC LIMIT 1'
        ).fetchone()
    assert row is not None
    return str(row[0])
