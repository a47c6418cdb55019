"""Threads written under schema v1 resumed by v2 code (a renamed field, a removed field and
a tightened type): migrated, validated and recorded as a new checkpoint; old checkpoints
untouched; invalid or unmigratable state refused with nothing written."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from statekeeper.errors import AnswerRequiredError, StateValidationError
from statekeeper.graphs import (
    MigrationResult,
    Runner,
    VersionedState,
    load_graph,
)
from tests.graphs.conftest import V1, V1_INPUT, V2, V2_WITHOUT_MIGRATION, Modules, checkpoints


def head(saver: Any, thread_id: str) -> Any:
    return saver.get_tuple({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}})


def next_nodes(saver: Any, ref: str, config: Any) -> tuple[str, ...]:
    return load_graph(ref, saver).get_state(config).next


def failed_in_triage(runner: Runner, modules: Modules, values: dict[str, Any]) -> None:
    """A v1 run that stopped with an exception in triage: triage is next."""
    modules.fail_once("triage")
    with pytest.raises(RuntimeError, match="triage failed once"):
        runner.run(modules.write(V1), values, thread_id="t")


def test_mid_run_thread_is_migrated_and_continues_with_the_same_next_nodes(
    runner: Runner, saver: Any, modules: Modules
) -> None:
    failed_in_triage(runner, modules, V1_INPUT)
    before = checkpoints(saver, "t")
    v1_head = head(saver, "t")
    assert next_nodes(saver, modules.ref, v1_head.config) == ("triage",)
    modules.write(V2)

    # reading migrates in memory only
    state = runner.state("t")
    assert isinstance(state, VersionedState)
    assert state.schema_version == 2
    assert state.model_dump(exclude={"messages"}) == {
        "notes": ["intake"],
        "requester": "ada",
        "priority": 3,
    }
    assert checkpoints(saver, "t") == before

    resumed = runner.resume("t")
    assert resumed.next == ("review",)
    # notes (operator.add) were not doubled by the migration; intake did not run again
    assert resumed.values["notes"] == ["intake", "triage p3 (v2)"]
    assert [m.content for m in resumed.values["messages"]] == ["help ada"]
    assert resumed.interrupts[0].value == {"question": "approve?", "requester": "ada"}
    assert modules.calls() == Counter(intake=1, triage=2, review=1)

    after = checkpoints(saver, "t")
    assert after[-len(before) :] == before  # the old checkpoints are untouched
    [migration] = [
        t
        for t in saver.list({"configurable": {"thread_id": "t"}})
        if t.metadata.get("statekeeper_migrated_from") is not None
    ]
    assert migration.parent_config["configurable"]["checkpoint_id"] == v1_head.checkpoint["id"]
    assert {k: migration.metadata[k] for k in migration.metadata if k != "parents"} == {
        "source": "update",
        "step": v1_head.metadata["step"] + 1,
        "statekeeper_graph": modules.ref,
        "statekeeper_schema_version": 2,
        "statekeeper_migrated_from": 1,
    }
    values = migration.checkpoint["channel_values"]
    assert (values["requester"], values["priority"]) == ("ada", 3)
    assert "customer" not in values
    assert "legacy_flag" not in values
    assert "customer" not in migration.checkpoint["channel_versions"]
    assert "legacy_flag" not in migration.checkpoint["channel_versions"]
    assert migration.checkpoint["versions_seen"] == v1_head.checkpoint["versions_seen"]
    # the stored v1 checkpoint still holds v1 values; the migration has the same next
    assert head_values(saver, v1_head.config) == {"customer": "ada", "priority": "3"}
    assert next_nodes(saver, modules.ref, migration.config) == ("triage",)
    # later checkpoints of the run record v2
    assert after[0][1]["statekeeper_schema_version"] == 2


def head_values(saver: Any, config: Any) -> dict[str, Any]:
    values = saver.get_tuple(config).checkpoint["channel_values"]
    return {k: values[k] for k in ("customer", "priority") if k in values}


def test_pending_interrupt_is_answered_after_migration(
    runner: Runner, saver: Any, modules: Modules
) -> None:
    first = runner.run(modules.write(V1), V1_INPUT, thread_id="t")
    assert first.next == ("review",)
    before = checkpoints(saver, "t")
    modules.write(V2)

    # a refused resume has recorded the migration, and nothing else
    with pytest.raises(AnswerRequiredError, match="approve"):
        runner.resume("t")
    after = checkpoints(saver, "t")
    assert after[1:] == before
    assert after[0][1]["statekeeper_migrated_from"] == 1

    done = runner.resume("t", answer="yes")
    assert done.status == "done"
    # the interrupted super-step ran again under v2 and received the answer
    assert done.values["notes"] == ["intake", "triage p3", "review yes (v2)", "closed (v2)"]
    assert modules.calls() == Counter(intake=1, triage=1, review=2, close=1)


def test_explicit_migration_then_resume(runner: Runner, saver: Any, modules: Modules) -> None:
    runner.run(modules.write(V1), V1_INPUT, thread_id="t")
    modules.write(V2)

    result = runner.migrate("t")
    assert isinstance(result, MigrationResult)
    assert (result.thread_id, result.from_version, result.to_version) == ("t", 1, 2)
    assert head(saver, "t").checkpoint["id"] == result.checkpoint_id
    assert runner.migrate("t") is None  # already current: nothing written
    assert checkpoints(saver, "t")[0][0] == result.checkpoint_id

    # the migration checkpoint has no pending writes; the interrupt it re-asks is known
    with pytest.raises(AnswerRequiredError) as e:
        runner.resume("t")
    assert [i.value["question"] for i in e.value.interrupts] == ["approve?"]
    assert runner.resume("t", answer="ok").values["notes"][-2:] == [
        "review ok (v2)",
        "closed (v2)",
    ]


@pytest.mark.parametrize(
    ("priority", "field", "message"),
    [
        ("9", "priority", "less than or equal to 5"),  # migrates, then fails validation
        ("high", None, "v1_to_v2 from version 1 to 2 failed: ValueError"),  # cannot migrate
    ],
)
def test_invalid_or_unmigratable_state_is_refused_and_nothing_written(
    runner: Runner,
    saver: Any,
    modules: Modules,
    priority: str,
    field: str | None,
    message: str,
) -> None:
    failed_in_triage(runner, modules, {**V1_INPUT, "priority": priority})
    before = checkpoints(saver, "t")
    modules.write(V2)
    for attempt in (runner.resume, runner.migrate, runner.state):
        with pytest.raises(StateValidationError, match=message) as e:
            attempt("t")
        assert (e.value.thread_id, e.value.checkpoint_id) == ("t", before[0][0])
        assert e.value.field == field
        assert "'t'" in str(e.value)
        assert before[0][0] in str(e.value)
    assert checkpoints(saver, "t") == before
    assert modules.calls() == Counter(intake=1, triage=1)


def test_missing_migration_is_refused(runner: Runner, saver: Any, modules: Modules) -> None:
    failed_in_triage(runner, modules, V1_INPUT)
    before = checkpoints(saver, "t")
    modules.write(V2_WITHOUT_MIGRATION)
    with pytest.raises(StateValidationError, match="no migration from version 1 to 2"):
        runner.resume("t")
    assert checkpoints(saver, "t") == before


def test_newer_state_than_the_code_is_refused(runner: Runner, saver: Any, modules: Modules) -> None:
    modules.write(V2)
    runner.run(modules.ref, {"requester": "ada", "priority": 2}, thread_id="t")
    modules.write(V1)  # rolled back
    with pytest.raises(StateValidationError, match="version 2 of Ticket, newer than"):
        runner.resume("t", answer="yes")


def test_thread_without_recorded_version_is_version_1_unless_told(
    saver: Any, modules: Modules
) -> None:
    load_graph(modules.write(V1), saver).invoke(V1_INPUT, {"configurable": {"thread_id": "t"}})
    modules.write(V2)
    with pytest.raises(StateValidationError, match="field 'requester'"):
        Runner(saver, unrecorded_version=2).state("t", graph_ref=modules.ref)
    done = Runner(saver).resume("t", answer="yes", graph_ref=modules.ref)
    assert done.values["notes"][-1] == "closed (v2)"
    migrated = [m for _, m in checkpoints(saver, "t") if "statekeeper_migrated_from" in m]
    assert [m["statekeeper_migrated_from"] for m in migrated] == [1]


def test_fork_of_a_run_input_is_migrated_on_resume(
    runner: Runner, saver: Any, modules: Modules
) -> None:
    runner.run(modules.write(V1), V1_INPUT, thread_id="t")
    [input_id] = [cid for cid, m in checkpoints(saver, "t") if m["source"] == "input"]
    fork = runner.fork("t", input_id, to_thread="again")
    assert fork.next == ("__start__",)
    modules.write(V2)
    # only the input is stored: it is the state that is migrated
    assert runner.state("again").model_dump(exclude={"messages", "notes"}) == {  # type: ignore[union-attr]
        "requester": "ada",
        "priority": 3,
    }
    result = runner.resume("again")
    assert result.values["notes"] == ["intake", "triage p3 (v2)"]
    assert result.values["requester"] == "ada"


def test_fork_of_an_older_checkpoint_holds_it_migrated(
    runner: Runner, saver: Any, modules: Modules
) -> None:
    runner.run(modules.write(V1), V1_INPUT, thread_id="t")
    runner.resume("t", answer="yes")
    before = checkpoints(saver, "t")
    [after_intake] = [cid for cid, m in before if m["step"] == 1]
    modules.write(V2)

    fork = runner.fork("t", after_intake)
    assert fork.next == ("triage",)
    latest = checkpoints(saver, "t")
    assert latest[1:] == before
    meta = latest[0][1]
    assert (meta["source"], meta["statekeeper_forked_from"]) == ("fork", after_intake)
    assert (meta["statekeeper_migrated_from"], meta["statekeeper_schema_version"]) == (1, 2)
    done = runner.resume("t")
    assert done.values["notes"] == ["intake", "triage p3 (v2)"]
    assert done.values["requester"] == "ada"


@pytest.mark.parametrize(
    ("migration", "named"),
    [
        ('values["requester"] = values.pop("customer")', None),
        # keeps the removed v1 field: a copy, not a rename
        ('values["requester"] = values["customer"]', "'customer'"),
        ('values["requester"] = values.pop("customer"); values["zzz"] = 1', "'zzz'"),
    ],
)
def test_keys_a_migration_returns_that_are_not_fields_are_refused(
    runner: Runner, saver: Any, modules: Modules, migration: str, named: str | None
) -> None:
    """What a migration returns is stored as the state's channels: a key that is no
    field of the state (as ``fork(values=...)`` refuses it) is refused, nothing written."""
    failed_in_triage(runner, modules, V1_INPUT)
    before = checkpoints(saver, "t")
    modules.write(V2.replace('values["requester"] = values.pop("customer")', migration))
    if named is None:  # the rename itself migrates
        assert runner.migrate("t") is not None
        return
    for attempt in (runner.resume, runner.migrate, runner.state):
        with pytest.raises(StateValidationError) as e:
            attempt("t")
        message = str(e.value)
        assert "migration v1_to_v2 from version 1 to 2 returned keys" in message
        assert f"not channels of Ticket: {named} (it has: " in message
        assert (e.value.thread_id, e.value.field) == ("t", named.strip("'"))
    with pytest.raises(StateValidationError, match="returned keys"):
        runner.fork("t", before[0][0], to_thread="copy")
    assert checkpoints(saver, "t") == before
    assert checkpoints(saver, "copy") == []
