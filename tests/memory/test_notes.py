"""Notes: schema 2 (times, fact key, links), its JSON round trip, and the upgrade of notes
written under schema 1, checked against values the version-1 code wrote."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import pytest
from langgraph.store.memory import InMemoryStore

from statekeeper.errors import ConfigurationError, SerializationError
from statekeeper.memory import notes as notes_module
from statekeeper.memory.notes import (
    NOTE_KIND,
    Note,
    Provenance,
    note_migration,
    upgrade_note_value,
)
from statekeeper.memory.recall import Freshness, recall
from statekeeper.memory.store import SqliteStore
from tests.memory.conftest import T0, make_note

V1_FIXTURES = Path(__file__).parent / "data" / "notes_v1.json"


def v1_items() -> list[dict[str, Any]]:
    """Notes as statekeeper's schema-1 code stored them (``Note.to_value()`` of that
    version), with the key and namespace they were stored under."""
    items: list[dict[str, Any]] = json.loads(V1_FIXTURES.read_text(encoding="utf-8"))
    return items


def provenance(**changes: Any) -> Provenance:
    fields: dict[str, Any] = {
        "thread_id": "t",
        "message_ids": ("m1",),
        "said_from": T0,
        "said_to": T0 + datetime.timedelta(minutes=5),
        "created_at": T0 + datetime.timedelta(hours=1),
        "summarizer": "test/1",
    }
    return Provenance(**{**fields, **changes})


class TestSchema:
    def test_round_trip_and_the_stored_value(self) -> None:
        note = Note(
            text="Ana: We're relocating to Toronto!",
            provenance=provenance(),
            topics=("Toronto",),
            subject="Ana",
            attribute="Home",
            valid_to=T0 + datetime.timedelta(days=30),
            superseded_by="k2",
            supersedes=("k0",),
            conflicts_with=("k9",),
        )
        value = note.to_value()
        assert value["kind"] == NOTE_KIND
        assert value["schema_version"] == Note.schema_version == 3
        assert (value["subject"], value["attribute"]) == ("ana", "home")  # top level, filterable
        assert json.loads(json.dumps(value)) == value
        assert Note.from_value(value) == note
        assert note.fact == ("ana", "home")

    def test_times_default_from_the_provenance(self) -> None:
        said = provenance()
        note = Note(text="x", provenance=said)
        assert note.observed_at == said.said_to
        assert note.valid_from == note.observed_at
        assert note.valid_to is None
        only_from = Note(text="x", provenance=provenance(said_to=None))
        assert only_from.observed_at == T0
        unsaid = Note(text="x", provenance=provenance(said_from=None, said_to=None))
        assert unsaid.observed_at == unsaid.provenance.created_at
        explicit = Note(text="x", provenance=said, observed_at=T0, valid_from=T0 - _days(1))
        assert (explicit.observed_at, explicit.valid_from) == (T0, T0 - _days(1))

    def test_times_are_aware_and_validity_is_half_open(self) -> None:
        naive = datetime.datetime(2024, 5, 8, 10, 0)
        note = Note(text="x", provenance=provenance(said_to=naive), valid_to=naive + _days(2))
        assert note.observed_at == naive.replace(tzinfo=datetime.UTC)
        assert note.valid_to == (naive + _days(2)).replace(tzinfo=datetime.UTC)
        assert note.valid_at(note.valid_from)
        assert note.valid_at(naive + _days(1))  # a naive moment is taken as UTC too
        assert not note.valid_at(note.valid_to)
        assert not note.valid_at(note.valid_from - datetime.timedelta(microseconds=1))

    @pytest.mark.parametrize(
        "changes",
        [
            {"subject": "ana"},  # an attribute too, or neither
            {"attribute": "home"},
            {"subject": " . ", "attribute": "home"},  # no word left
            {"valid_to": "2020-01-01T00:00:00+00:00"},  # before valid_from
            {"surprise": 1},
        ],
    )
    def test_invalid_notes_are_refused(self, changes: dict[str, Any]) -> None:
        value = {**make_note("x").to_value(), **changes}
        with pytest.raises(SerializationError, match="invalid note"):
            Note.from_value(value)

    def test_labels_are_normalised(self) -> None:
        note = Note(text="x", provenance=provenance(), subject="  ANA  Silva ", attribute="Home.")
        assert note.fact == ("ana silva", "home")


class TestUpgrade:
    def test_v1_fixtures_load_as_the_current_version(self) -> None:
        for item in v1_items():
            stored = item["value"]
            before = json.dumps(stored, sort_keys=True)
            assert stored["schema_version"] == 1
            note = Note.from_value(stored)
            assert json.dumps(stored, sort_keys=True) == before  # the stored value is kept
            assert note.key == item["key"]  # same note, same key
            assert note.text == stored["text"]
            assert list(note.topics) == stored["topics"]
            assert note.provenance.model_dump(mode="json") == stored["provenance"]
            said = [stored["provenance"][f] for f in ("said_to", "said_from", "created_at")]
            expected = datetime.datetime.fromisoformat(next(t for t in said if t))
            if expected.tzinfo is None:
                expected = expected.replace(tzinfo=datetime.UTC)
            assert note.observed_at == note.valid_from == expected
            assert note.valid_to is None
            assert note.fact is None
            assert (note.superseded_by, note.supersedes, note.conflicts_with) == (None, (), ())
            assert (note.unit, note.dates) == ("turn", ())
            assert note.to_value()["schema_version"] == 3
            assert Note.from_value(note.to_value()) == note

    def test_v1_fixtures_cover_what_version_1_wrote(self) -> None:
        provenances = [item["value"]["provenance"] for item in v1_items()]
        assert any(p["said_to"] and p["said_to"].endswith("Z") for p in provenances)
        assert any(p["said_to"] and "+02:00" in p["said_to"] for p in provenances)
        assert any(p["said_to"] and p["said_to"][-6] not in "+-Z" for p in provenances)  # naive
        assert any(p["said_to"] is None for p in provenances)

    @pytest.mark.parametrize("kind", ["statekeeper", "langgraph-inmemory"])
    def test_v1_notes_in_a_store_are_recalled(self, kind: str, store: SqliteStore) -> None:
        target: Any = store if kind == "statekeeper" else InMemoryStore()
        for item in v1_items():
            target.put(tuple(item["namespace"]), item["key"], item["value"])
        (hit,) = recall(
            target, ("notes",), "beagle puppy Biscuit", freshness=Freshness(as_of=T0 + _days(30))
        )
        assert hit.key == v1_items()[0]["key"]
        assert hit.note.valid_to is None

    def test_upgrade_note_value(self) -> None:
        stored = v1_items()[0]["value"]
        upgraded = upgrade_note_value(stored)
        assert upgraded["schema_version"] == 3
        assert (upgraded["unit"], upgraded["dates"]) == ("turn", [])
        assert upgraded["observed_at"] == stored["provenance"]["said_to"]
        current = make_note("x").to_value()
        assert upgrade_note_value(current) == current
        assert upgrade_note_value(current) is not current

    @pytest.mark.parametrize(
        ("version", "message"),
        [(4, "newer"), (99, "newer"), (0, "invalid"), ("2", "invalid"), (True, "invalid")],
    )
    def test_unreadable_versions_are_refused(self, version: object, message: str) -> None:
        value = {**make_note("x").to_value(), "schema_version": version}
        with pytest.raises(SerializationError, match=message):
            Note.from_value(value)
        with pytest.raises(SerializationError, match="not a statekeeper note"):
            Note.from_value({**value, "kind": "other"})

    def test_a_failing_migration_makes_the_note_unreadable(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        def broken(value: dict[str, Any]) -> dict[str, Any]:
            raise KeyError("provenance")

        monkeypatch.setitem(notes_module._MIGRATIONS, 1, broken)
        with pytest.raises(SerializationError, match="from schema version 1: KeyError"):
            Note.from_value(v1_items()[0]["value"])

    def test_a_damaged_v1_value_is_refused(self) -> None:
        value = {k: v for k, v in v1_items()[0]["value"].items() if k != "provenance"}
        with pytest.raises(SerializationError):
            Note.from_value(value)

    @pytest.mark.parametrize("version", [0, 3, 4])
    def test_the_registry_refuses_versions_it_cannot_upgrade(self, version: int) -> None:
        with pytest.raises(ConfigurationError, match="migration"):
            note_migration(from_version=version)

    def test_the_registry_refuses_a_second_migration(self) -> None:
        with pytest.raises(ConfigurationError, match="exists"):
            note_migration(from_version=1)


def _days(n: float) -> datetime.timedelta:
    return datetime.timedelta(days=n)
