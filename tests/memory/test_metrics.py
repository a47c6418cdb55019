"""Recall and compaction events, and their aggregation per thread and time window."""

from __future__ import annotations

import datetime
from collections.abc import Iterator

import pytest

from statekeeper.errors import ConfigurationError
from statekeeper.memory.metrics import (
    CompactionEvent,
    RecallEvent,
    log_compaction,
    log_recall,
    memory_stats,
    overlap,
    previous_keys,
)
from statekeeper.memory.notes import Note, Provenance
from statekeeper.memory.recall import Freshness, Limits, RecallLog, recall
from statekeeper.memory.store import SqliteStore, open_store

T0 = datetime.datetime(2026, 3, 1, 9, 0, tzinfo=datetime.UTC)


@pytest.fixture
def store() -> Iterator[SqliteStore]:
    with open_store("memory://") as opened:
        yield opened


def recall_event(
    at: datetime.datetime,
    *,
    thread: str | None = "t1",
    returned: int = 2,
    dropped: int = 1,
    stale: int = 0,
    top: float | None = 0.8,
    keys: tuple[str, ...] = ("a", "b"),
    overlap_: float | None = None,
) -> RecallEvent:
    return RecallEvent(
        at=at,
        namespace=("notes", thread or "shared"),
        query="where does Ana work?",
        thread_id=thread,
        returned=returned,
        dropped=dropped,
        stale=stale,
        top_score=top,
        keys=keys,
        overlap=overlap_,
    )


def test_overlap_is_the_share_of_keys_seen_last_time() -> None:
    assert overlap(["a", "b"], None) is None
    assert overlap(["a", "b"], ["b", "c"]) == 0.5
    assert overlap(["a", "b"], ["a", "b"]) == 1.0
    assert overlap([], []) == 1.0
    assert overlap([], ["a"]) == 0.0


def test_previous_keys_follow_the_latest_recall_of_a_query(store: SqliteStore) -> None:
    assert previous_keys(store, ("notes", "t1"), "where does Ana work?") is None
    log_recall(store, recall_event(T0, keys=("a", "b")))
    log_recall(store, recall_event(T0 + datetime.timedelta(minutes=1), keys=("c",)))
    # normalised: case and spacing do not make another query
    assert previous_keys(store, ("notes", "t1"), "Where  does ana WORK?") == ("c",)
    assert previous_keys(store, ("notes", "t2"), "where does Ana work?") is None


def test_stats_aggregate_overall_per_thread_and_per_window(store: SqliteStore) -> None:
    log_recall(store, recall_event(T0, returned=2, dropped=1, top=0.8))
    log_recall(
        store,
        recall_event(
            T0 + datetime.timedelta(hours=1), returned=0, dropped=3, top=None, keys=(), overlap_=0.0
        ),
    )
    log_recall(
        store,
        recall_event(
            T0 + datetime.timedelta(days=1), thread="t2", returned=4, stale=4, top=0.6, overlap_=1.0
        ),
    )
    log_compaction(store, CompactionEvent(T0, "t1", 3000, 1200, 200, 1800))
    log_compaction(
        store, CompactionEvent(T0 + datetime.timedelta(days=1), "t1", 2500, 1100, 250, 1400)
    )

    stats = memory_stats(store)
    overall = stats.overall
    assert overall.recalls == 3
    assert overall.notes_returned == pytest.approx(2.0)
    assert overall.dropped_below_floor == pytest.approx((1 + 3 + 1) / 3)
    assert overall.empty_share == pytest.approx(1 / 3)
    assert overall.top_score == pytest.approx(0.7)
    assert overall.stale_share == pytest.approx(4 / 10)
    assert overall.overlap == pytest.approx(0.5)
    assert (overall.compactions, overall.tokens_saved) == (2, 3200)

    by_thread = {row.group: row for row in stats.threads}
    assert by_thread["t1"].recalls == 2
    assert by_thread["t1"].tokens_saved == 3200
    assert by_thread["t2"].recalls == 1
    assert by_thread["t2"].compactions == 0
    assert [row.group for row in stats.windows] == [
        "2026-03-01T00:00:00+00:00",
        "2026-03-02T00:00:00+00:00",
    ]
    assert [row.recalls for row in stats.windows] == [2, 1]


def test_stats_filter_by_thread_and_time(store: SqliteStore) -> None:
    log_recall(store, recall_event(T0))
    log_recall(store, recall_event(T0 + datetime.timedelta(hours=2), thread="t2"))
    log_recall(store, recall_event(T0 + datetime.timedelta(hours=4)))
    assert memory_stats(store, thread_id="t1").overall.recalls == 2
    since = T0 + datetime.timedelta(hours=1)
    assert memory_stats(store, since=since).overall.recalls == 2
    assert (
        memory_stats(store, since=since, until=T0 + datetime.timedelta(hours=3)).overall.recalls
        == 1
    )
    hourly = memory_stats(store, window=datetime.timedelta(hours=1))
    assert len(hourly.windows) == 3


def test_nothing_logged_is_all_zero_not_an_error(store: SqliteStore) -> None:
    stats = memory_stats(store)
    assert stats.overall.recalls == 0
    assert stats.overall.top_score is None
    assert stats.overall.stale_share is None
    assert stats.threads == []
    assert stats.windows == []
    assert stats.to_json()["overall"]["recalls"] == 0


def test_bad_windows_and_naive_bounds_are_refused(store: SqliteStore) -> None:
    with pytest.raises(ConfigurationError, match="window"):
        memory_stats(store, window=datetime.timedelta(0))
    with pytest.raises(ConfigurationError, match="timezone"):
        memory_stats(store, since=datetime.datetime(2026, 1, 1))


def test_events_written_by_others_are_skipped(store: SqliteStore) -> None:
    store.put(("statekeeper", "log", "recall"), "junk", {"at": "not a time"})
    log_recall(store, recall_event(T0))
    assert memory_stats(store).overall.recalls == 1


def _note(text: str, message_id: str, **fields: object) -> Note:
    return Note(
        text=text,
        provenance=Provenance(
            thread_id="t1",
            message_ids=(message_id,),
            created_at=T0,
            said_from=T0,
            said_to=T0,
            summarizer="test/1",
        ),
        **fields,  # type: ignore[arg-type]
    )


def test_recall_logs_what_it_returned_dropped_and_filtered(store: SqliteStore) -> None:
    namespace = ("notes", "t1")
    notes = [
        _note("Ana adopted a cat named Miso", "m1"),
        _note("Ana has a cat allergy test next week at the clinic downtown", "m2"),
        _note("Ana's old cat Tom lived with her parents", "m3", valid_to=T0),
    ]
    for made in notes:
        store.put(namespace, made.key, made.to_value())
    later = T0 + datetime.timedelta(days=1)
    first = recall(
        store,
        namespace,
        "cat named Miso",
        limits=Limits(k=3, min_score=0.5),
        freshness=Freshness(clock=lambda: later),
        log=RecallLog(thread_id="t1"),
    )
    second = recall(
        store,
        namespace,
        "cat named Miso",
        limits=Limits(k=3, min_score=0.5),
        freshness=Freshness(clock=lambda: later),
        log=RecallLog(thread_id="t1"),
    )
    assert [hit.key for hit in first] == [notes[0].key] == [hit.key for hit in second]

    stats = memory_stats(store, thread_id="t1")
    row = stats.overall
    assert row.recalls == 2
    assert row.notes_returned == 1.0
    assert row.dropped_below_floor >= 1.0  # the allergy note matches "cat" only
    assert row.overlap == 1.0  # the second recall returned what the first did
    assert row.top_score is not None
    assert row.top_score >= 0.5


def test_recall_can_skip_logging(store: SqliteStore) -> None:
    made = _note("Ana adopted a cat named Miso", "m1")
    store.put(("notes", "t1"), made.key, made.to_value())
    recall(store, ("notes", "t1"), "cat", log=False)
    assert memory_stats(store).overall.recalls == 0


def test_each_compaction_is_logged_with_its_savings(store: SqliteStore) -> None:
    from langchain_core.messages import AIMessage, HumanMessage

    from statekeeper.memory.node import NoteOptions, SummarizationNode

    messages = []
    for turn in range(12):
        messages.append(
            HumanMessage(f"Turn {turn}: I walked my dog Rex to the lake.", id=f"h{turn}")
        )
        messages.append(AIMessage(f"Turn {turn}: That sounds lovely, tell me more.", id=f"a{turn}"))
    node = SummarizationNode(budget_tokens=120, store=store, notes=NoteOptions(clock=lambda: T0))
    update = node({"messages": messages}, {"configurable": {"thread_id": "t1"}})
    summary = update["summary"]
    stats = memory_stats(store, thread_id="t1")
    assert stats.overall.compactions == 1
    assert stats.overall.tokens_saved == summary["tokens_saved"] > 0
