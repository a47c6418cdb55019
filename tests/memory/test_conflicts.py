"""Contradictions: the conflict policies, applied when notes are written, in any store;
nothing deleted, the supersede chain queryable, and the summarization node using them."""

from __future__ import annotations

import datetime
import logging
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.graph.message import add_messages
from langgraph.store.memory import InMemoryStore

from statekeeper.errors import ConfigurationError
from statekeeper.memory.conflicts import (
    ConflictPolicy,
    KeepBothFlagged,
    LatestWins,
    ModelJudgedPolicy,
    resolve_policy,
    supersede_chain,
    write_note,
    write_notes,
)
from statekeeper.memory.node import NoteOptions, SummarizationNode
from statekeeper.memory.notes import Note, Provenance
from statekeeper.memory.recall import Freshness, recall
from statekeeper.memory.retrieval import format_memories
from tests.memory.conftest import T0

NS = ("users", "ana")
LATER = T0 + datetime.timedelta(days=365)  # recall as of a year on


def fact(
    text: str, day: int, *, subject: str = "Ana", attribute: str = "home", msg: str = ""
) -> Note:
    """A note of Ana's ``(subject, attribute)`` said ``day`` days after T0."""
    said = T0 + datetime.timedelta(days=day)
    return Note(
        text=text,
        provenance=Provenance(
            thread_id="t",
            message_ids=(msg or f"m{day}",),
            said_from=said,
            said_to=said,
            created_at=said + datetime.timedelta(minutes=1),
            summarizer="test/1",
        ),
        subject=subject,
        attribute=attribute,
    )


LISBON = fact("Ana lives in Lisbon", 0)
PORTO = fact("Ana moved to Porto and lives there now", 10)
TORONTO = fact("Ana lives in Toronto since the move", 20)


def stored(target: Any, namespace: tuple[str, ...] = NS) -> dict[str, Note]:
    return {item.key: Note.from_value(item.value) for item in target.search(namespace, limit=1000)}


def keys(hits: Any) -> list[str]:
    return [hit.key for hit in hits]


class TestLatestWins:
    def test_the_later_note_supersedes_and_nothing_is_deleted(self, any_store: Any) -> None:
        write_note(any_store, NS, LISBON)
        written = write_note(any_store, NS, PORTO)
        notes = stored(any_store)
        assert set(notes) == {LISBON.key, PORTO.key}
        old, new = notes[LISBON.key], notes[PORTO.key]
        assert new == written
        assert old.valid_to == new.valid_from == PORTO.valid_from
        assert old.superseded_by == new.key
        assert new.supersedes == (old.key,)
        assert new.valid_to is None
        assert new.superseded_by is None
        assert (old.text, old.provenance) == (LISBON.text, LISBON.provenance)  # only links

    def test_recall_hides_the_superseded_note_except_in_its_window(self, any_store: Any) -> None:
        write_notes(any_store, NS, [LISBON, PORTO])
        assert keys(
            recall(any_store, NS, "Where does Ana live?", freshness=Freshness(as_of=LATER))
        ) == [PORTO.key]
        in_window = T0 + datetime.timedelta(days=5)
        assert keys(
            recall(any_store, NS, "Where does Ana live?", freshness=Freshness(as_of=in_window))
        ) == [LISBON.key]
        everything = recall(
            any_store,
            NS,
            "Where does Ana live?",
            freshness=Freshness(as_of=LATER, include_expired=True),
        )
        assert set(keys(everything)) == {LISBON.key, PORTO.key}
        lines = format_memories(everything).splitlines()
        assert sorted(line.endswith(", superseded)") for line in lines) == [False, True]

    def test_a_chain_is_kept_in_order_whatever_the_order_of_writing(self, any_store: Any) -> None:
        write_note(any_store, NS, TORONTO)
        write_note(any_store, NS, LISBON)  # older than the current one: superseded at once
        write_note(any_store, NS, PORTO)  # between the two: inserted into the chain
        notes = stored(any_store)
        lisbon, porto, toronto = (notes[n.key] for n in (LISBON, PORTO, TORONTO))
        assert (lisbon.superseded_by, porto.superseded_by, toronto.superseded_by) == (
            porto.key,
            toronto.key,
            None,
        )
        assert (lisbon.supersedes, porto.supersedes, toronto.supersedes) == (
            (),
            (lisbon.key,),
            (porto.key,),
        )
        assert lisbon.valid_to == porto.valid_from
        assert porto.valid_to == toronto.valid_from
        assert toronto.valid_to is None
        for note in (LISBON, PORTO, TORONTO):
            assert supersede_chain(any_store, NS, note.key) == [lisbon, porto, toronto]

    def test_writing_again_keeps_links_and_does_not_resurrect(self, any_store: Any) -> None:
        write_notes(any_store, NS, [LISBON, PORTO])
        before = stored(any_store)
        retried = LISBON.model_copy(
            update={"provenance": LISBON.provenance.model_copy(update={"created_at": LATER})}
        )
        write_note(any_store, NS, retried)  # a retried step: same key, made again later
        write_note(any_store, NS, PORTO)
        after = stored(any_store)
        assert after[PORTO.key] == before[PORTO.key]
        assert after[LISBON.key].superseded_by == PORTO.key
        assert after[LISBON.key].valid_to == PORTO.valid_from
        assert keys(recall(any_store, NS, "Lisbon", freshness=Freshness(as_of=LATER))) == []

    def test_a_batch_resolves_in_order(self, any_store: Any) -> None:
        written = write_notes(any_store, NS, [LISBON, PORTO, TORONTO])
        assert [n.superseded_by for n in written] == [PORTO.key, TORONTO.key, None]
        assert written == [stored(any_store)[n.key] for n in (LISBON, PORTO, TORONTO)]

    def test_only_the_same_fact_in_the_same_namespace_conflicts(self, any_store: Any) -> None:
        job = fact("Ana works at Acme", 5, attribute="employer")
        sister = fact("Ana's sister lives in Dublin", 6, subject="ana's sister")
        unkeyed = Note(text="Ana likes Lisbon", provenance=PORTO.provenance.model_copy(
            update={"message_ids": ("m99",)}))  # fmt: skip
        write_notes(any_store, NS, [LISBON, job, sister, unkeyed])
        write_note(any_store, ("users", "ana", "archive"), PORTO)  # a sub-namespace
        write_note(any_store, ("users", "bob"), PORTO)
        assert all(n.superseded_by is None and not n.supersedes for n in stored(any_store).values())
        assert len(stored(any_store, NS)) == 5  # the prefix search sees the sub-namespace


class TestKeepBothFlagged:
    def test_both_stand_marked_as_conflicting(self, any_store: Any) -> None:
        write_notes(any_store, NS, [LISBON, PORTO], policy="keep_both_flagged")
        notes = stored(any_store)
        assert notes[LISBON.key].conflicts_with == (PORTO.key,)
        assert notes[PORTO.key].conflicts_with == (LISBON.key,)
        assert all(n.valid_to is None and n.superseded_by is None for n in notes.values())
        hits = recall(any_store, NS, "Where does Ana live?", freshness=Freshness(as_of=LATER))
        assert {hit.key: hit.conflicts for hit in hits} == {
            LISBON.key: (PORTO.key,),
            PORTO.key: (LISBON.key,),
        }
        assert hits[0].to_dict()["conflicts"] == list(hits[0].conflicts)
        assert all(line.endswith("contradicted by another note)") for line in
                   format_memories(hits).splitlines())  # fmt: skip

    def test_a_third_value_conflicts_with_both(self, any_store: Any) -> None:
        write_notes(any_store, NS, [LISBON, PORTO, TORONTO], policy=KeepBothFlagged())
        notes = stored(any_store)
        assert set(notes[TORONTO.key].conflicts_with) == {LISBON.key, PORTO.key}
        assert set(notes[LISBON.key].conflicts_with) == {PORTO.key, TORONTO.key}


class TestModelJudged:
    def judged(self, any_store: Any, *answers: str, **options: Any) -> dict[str, Note]:
        policy = ModelJudgedPolicy(FakeListChatModel(responses=list(answers)), **options)
        write_notes(any_store, NS, [LISBON, PORTO], policy=policy)
        return stored(any_store)

    def test_a_contradiction_is_resolved_by_then(self, any_store: Any) -> None:
        notes = self.judged(any_store, '```json\n{"contradicts": true}\n```')
        assert notes[LISBON.key].superseded_by == PORTO.key

    def test_no_contradiction_keeps_both_unlinked(self, any_store: Any) -> None:
        notes = self.judged(any_store, '{"contradicts": false}')
        assert all(n.superseded_by is None and not n.conflicts_with for n in notes.values())
        assert (
            len(recall(any_store, NS, "Where does Ana live?", freshness=Freshness(as_of=LATER)))
            == 2
        )

    def test_then_may_flag(self, any_store: Any) -> None:
        notes = self.judged(any_store, '{"contradicts": true}', then=KeepBothFlagged())
        assert notes[PORTO.key].conflicts_with == (LISBON.key,)

    @pytest.mark.parametrize("answer", ["maybe?", '{"contradicts": "yes"}', "[true]", "{bad"])
    def test_a_malformed_answer_falls_back_to_the_key_rule(
        self, any_store: Any, answer: str, caplog: pytest.LogCaptureFixture
    ) -> None:
        with caplog.at_level(logging.WARNING):
            notes = self.judged(any_store, answer)
        assert notes[LISBON.key].superseded_by == PORTO.key
        assert "judging by the key with latest_wins" in caplog.text

    def test_the_model_sees_both_notes(self) -> None:
        seen: list[list[BaseMessage]] = []

        class Recording(FakeListChatModel):
            def invoke(self, input: Any, *args: Any, **kwargs: Any) -> Any:
                seen.append(list(input))
                return AIMessage('{"contradicts": true}')

        policy = ModelJudgedPolicy(Recording(responses=[]))
        assert policy.name == "model_judged:latest_wins"
        assert policy.judge(PORTO, LISBON) == "supersede"
        prompt = seen[0][1].text
        assert "(said 2024-05-08, about ana / home): Ana lives in Lisbon" in prompt
        assert "(said 2024-05-18, about ana / home): Ana moved to Porto" in prompt


def test_policies_by_name_and_refusals() -> None:
    assert isinstance(resolve_policy("latest_wins"), LatestWins)
    assert isinstance(resolve_policy("keep_both_flagged"), KeepBothFlagged)
    assert isinstance(LatestWins(), ConflictPolicy)
    for bad in ("newest", None, 3):
        with pytest.raises(ConfigurationError, match="conflict policy"):
            resolve_policy(bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="conflict policy"):
        SummarizationNode(
            budget_tokens=10,
            notes=NoteOptions(conflict_policy="oldest_wins"),  # type: ignore[arg-type]
        )


def test_supersede_chain_of_unknown_and_lone_notes(any_store: Any) -> None:
    assert supersede_chain(any_store, NS, "nothing-here") == []
    write_note(any_store, NS, LISBON)
    assert supersede_chain(any_store, NS, LISBON.key) == [LISBON]


# -- in the summarization node ------------------------------------------------------------


def said(day: int) -> dict[str, str]:
    return {"timestamp": (T0 + datetime.timedelta(days=day)).isoformat()}


def session(day: int, statement: str) -> list[BaseMessage]:
    return [
        HumanMessage(statement, id=f"h{day}", name="Ana", additional_kwargs=said(day)),
        AIMessage("Good to know!", id=f"a{day}", additional_kwargs=said(day)),
        HumanMessage("Anyway, what's the weather like?", id=f"q{day}", name="Ana"),
        AIMessage("Sunny all week.", id=f"r{day}"),
    ]


@pytest.mark.parametrize(
    ("policy", "superseded"), [("latest_wins", True), ("keep_both_flagged", False)]
)
def test_the_node_applies_its_policy_across_compactions(policy: Any, superseded: bool) -> None:
    target = InMemoryStore()
    clock = [T0]
    node = SummarizationNode(
        budget_tokens=30,
        keep_tokens=0,
        store=target,
        notes=NoteOptions(clock=lambda: clock[0], conflict_policy=policy),
    )
    config: Any = {"configurable": {"thread_id": "ana"}}
    state: dict[str, Any] = {"messages": []}
    for day, statement in ((0, "I live in Lisbon with my partner."), (40, "We moved to Porto!")):
        clock[0] = T0 + datetime.timedelta(days=day, hours=1)
        state["messages"] = add_messages(state["messages"], session(day, statement))
        update = node(state, config)
        state["messages"] = add_messages(state["messages"], update["messages"])
    notes = {n.text: n for n in stored(target, ("notes", "ana")).values()}
    lisbon, porto = (
        notes["Ana: I live in Lisbon with my partner."],
        notes["Ana: We moved to Porto!"],
    )
    assert lisbon.fact == porto.fact == ("ana", "home")
    hits = recall(
        target, ("notes", "ana"), "Where does Ana live?", freshness=Freshness(as_of=LATER)
    )
    if superseded:
        assert (lisbon.superseded_by, porto.supersedes) == (porto.key, (lisbon.key,))
        assert keys(hits) == [porto.key]
        then = T0 + datetime.timedelta(days=20)
        hits_then = recall(
            target, ("notes", "ana"), "Where does Ana live?", freshness=Freshness(as_of=then)
        )
        assert lisbon.key in keys(hits_then)
    else:
        assert (lisbon.conflicts_with, porto.conflicts_with) == ((porto.key,), (lisbon.key,))
        assert set(keys(hits)) == {lisbon.key, porto.key}
