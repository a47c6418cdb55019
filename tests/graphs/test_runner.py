"""``Runner``: run, resume after a kill, an exception or at an ``interrupt()``, fork."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from langgraph.types import Interrupt

from statekeeper.checkpointers import open_checkpointer
from statekeeper.errors import (
    AnswerRequiredError,
    ConfigurationError,
    GraphLoadError,
    InvalidInputError,
    NoPendingInterruptError,
    NothingToResumeError,
    ThreadBusyError,
    ThreadExistsError,
    ThreadNotFoundError,
)
from statekeeper.graphs import Runner, RunResult
from statekeeper.threads import summaries
from tests.graphs.conftest import V1, V1_INPUT, Modules, checkpoints

ROOT = Path(__file__).resolve().parents[2]
NOTES_DONE = ["intake", "triage p3", "review yes", "closed"]


def run_to_review(runner: Runner, modules: Modules, thread_id: str = "t") -> RunResult:
    result = runner.run(modules.write(V1), V1_INPUT, thread_id=thread_id)
    assert result.status == "interrupted"
    assert result.next == ("review",)
    return result


def test_run_stops_at_interrupt_and_resume_answers_it(runner: Runner, modules: Modules) -> None:
    first = run_to_review(runner, modules)
    assert first.thread_id == "t"
    [asked] = first.interrupts
    assert isinstance(asked, Interrupt)
    assert asked.value == {"question": "approve?", "customer": "ada"}
    assert first.values["notes"] == ["intake", "triage p3"]

    done = runner.resume("t", answer="yes")
    assert done.status == "done"
    assert (done.next, done.interrupts) == ((), ())
    assert done.values["notes"] == NOTES_DONE
    assert [m.content for m in done.values["messages"]] == ["help ada", "closed"]
    assert modules.calls() == Counter(intake=1, triage=1, review=2, close=1)


def test_every_checkpoint_records_graph_and_version(
    runner: Runner, saver: Any, modules: Modules
) -> None:
    run_to_review(runner, modules)
    runner.resume("t", answer="yes")
    metas = [meta for _, meta in checkpoints(saver, "t")]
    assert len(metas) == 6  # the input, then one per super-step: start and four nodes
    for meta in metas:
        assert meta["statekeeper_graph"] == modules.ref
        assert meta["statekeeper_schema_version"] == 1


def test_run_makes_a_thread_id_and_refuses_an_existing_thread(
    runner: Runner, saver: Any, modules: Modules
) -> None:
    result = runner.run(modules.write(V1), V1_INPUT)
    assert len(result.thread_id) == 36  # a UUID
    before = checkpoints(saver, result.thread_id)
    with pytest.raises(ThreadExistsError, match=result.thread_id):
        runner.run(modules.ref, V1_INPUT, thread_id=result.thread_id)
    assert checkpoints(saver, result.thread_id) == before


def test_resume_errors_say_what_is_wrong(runner: Runner, modules: Modules) -> None:
    with pytest.raises(ThreadNotFoundError, match="thread 'nobody' does not exist"):
        runner.resume("nobody")
    run_to_review(runner, modules)
    with pytest.raises(AnswerRequiredError, match="waiting for an answer") as e:
        runner.resume("t")
    assert e.value.thread_id == "t"
    assert [i.value["question"] for i in e.value.interrupts] == ["approve?"]

    runner.resume("t", answer="yes")
    with pytest.raises(NothingToResumeError, match="thread 't' has finished"):
        runner.resume("t")
    with pytest.raises(NothingToResumeError):
        runner.resume("t", answer="again")
    assert modules.calls()["close"] == 1


def test_answer_without_a_pending_interrupt_is_refused(runner: Runner, modules: Modules) -> None:
    modules.fail_once("triage")
    with pytest.raises(RuntimeError, match="triage failed once"):
        runner.run(modules.write(V1), V1_INPUT, thread_id="t")
    with pytest.raises(NoPendingInterruptError, match="not waiting at an interrupt"):
        runner.resume("t", answer="yes")
    assert runner.resume("t").next == ("review",)


def test_exception_in_a_node_resumes_from_the_last_completed_step(
    runner: Runner, modules: Modules
) -> None:
    modules.fail_once("triage")
    with pytest.raises(RuntimeError, match="triage failed once"):
        runner.run(modules.write(V1), V1_INPUT, thread_id="t")
    assert modules.calls() == Counter(intake=1, triage=1)

    resumed = runner.resume("t")
    assert resumed.next == ("review",)
    runner.resume("t", answer="yes")
    # intake ran once: it had completed before the failure
    assert modules.calls() == Counter(intake=1, triage=2, review=2, close=1)
    assert runner.state("t").notes == NOTES_DONE  # type: ignore[union-attr]


class _Killed(BaseException):
    """Stands for the process dying: nothing after it runs, no handler catches it."""


def test_resume_continues_a_step_whose_writes_were_saved_but_not_its_checkpoint(
    runner: Runner, saver: Any, modules: Modules, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The process dies after triage's writes are stored and before the checkpoint that
    # applies them: LangGraph's get_state() then lists no next node, yet the run is not
    # finished, and invoke(None) would carry on from the stored writes.
    real_put = saver.put

    def put(config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        if metadata.get("step") == 2:  # the checkpoint after triage
            raise _Killed
        return real_put(config, checkpoint, metadata, new_versions)

    monkeypatch.setattr(saver, "put", put)
    with pytest.raises(_Killed):
        runner.run(modules.write(V1), V1_INPUT, thread_id="t")
    monkeypatch.setattr(saver, "put", real_put)
    [summary] = summaries(saver)
    assert (summary.status, summary.next) == ("pending", ("triage",))

    resumed = runner.resume("t")
    assert resumed.next == ("review",)
    assert modules.calls() == Counter(intake=1, triage=1, review=1)  # triage not rerun
    done = runner.resume("t", answer="yes")
    assert done.values["notes"] == NOTES_DONE


def test_resume_after_the_process_was_killed(tmp_path: Path, modules: Modules) -> None:
    url = f"sqlite:///{tmp_path}/state.db"
    modules.write(V1)
    code = (
        f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
        "from statekeeper.checkpointers import open_checkpointer\n"
        "from statekeeper.graphs import Runner\n"
        f"with open_checkpointer({url!r}) as saver:\n"
        f"    Runner(saver).run({modules.ref!r}, {V1_INPUT!r}, thread_id='killed')\n"
    )
    env = dict(os.environ, STATEKEEPER_TEST_KILL_AT="triage")
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, timeout=60
    )
    assert proc.returncode == 17, proc.stderr.decode()
    assert modules.calls() == Counter(intake=1, triage=1)

    with open_checkpointer(url) as saver:  # a new process would open it like this
        runner = Runner(saver)
        resumed = runner.resume("killed")  # by thread id only: the graph is in metadata
        assert resumed.next == ("review",)
        done = runner.resume("killed", answer="yes")
    assert done.values["notes"] == NOTES_DONE
    assert modules.calls() == Counter(intake=1, triage=2, review=2, close=1)


def test_busy_thread_is_refused(tmp_path: Path, modules: Modules) -> None:
    url = f"sqlite:///{tmp_path}/state.db"
    with open_checkpointer(url) as saver, open_checkpointer(url) as elsewhere:
        runner = Runner(saver)
        run_to_review(runner, modules)
        before = checkpoints(saver, "t")
        with elsewhere.claim_thread("t"):
            with pytest.raises(ThreadBusyError, match="being run by another process") as e:
                runner.resume("t", answer="yes")
            assert e.value.thread_id == "t"
            with pytest.raises(ThreadBusyError):
                runner.run(modules.ref, V1_INPUT, thread_id="t")
            with pytest.raises(ThreadBusyError):
                runner.fork("t", before[-1][0])
            with pytest.raises(ThreadBusyError):
                runner.migrate("t")
        assert checkpoints(saver, "t") == before
        assert runner.resume("t", answer="yes").status == "done"


def test_thread_written_outside_the_runner_needs_a_graph_ref(
    runner: Runner, saver: Any, modules: Modules
) -> None:
    from statekeeper.graphs import load_graph

    graph = load_graph(modules.write(V1), saver)
    graph.invoke(V1_INPUT, {"configurable": {"thread_id": "plain"}})
    with pytest.raises(ConfigurationError, match="not started by a statekeeper runner"):
        runner.resume("plain", answer="yes")
    # treated as schema version 1, which it is
    done = runner.resume("plain", answer="yes", graph_ref=modules.ref)
    assert done.values["notes"] == NOTES_DONE


def test_a_graph_without_the_waiting_node_is_refused_and_the_answer_kept(
    runner: Runner, saver: Any, modules: Modules
) -> None:
    """Resumed with another graph, LangGraph skipped the node the thread waited at
    without a word: the answer was spent and nothing ran. Now nothing is written."""
    run_to_review(runner, modules)
    before = checkpoints(saver, "t")
    other = "tests.graphs.counter_graph:graph"
    refused = rf"graph '{other}' has no node 'review', which thread 't' waits to run; it was"
    with pytest.raises(ConfigurationError, match=refused):
        runner.resume("t", answer="yes", graph_ref=other)
    with pytest.raises(ConfigurationError, match=refused):
        runner.fork("t", before[0][0], graph_ref=other)
    with pytest.raises(ConfigurationError, match=refused):
        runner.fork_and_resume("t", before[0][0], answer="yes", graph_ref=other)
    assert checkpoints(saver, "t") == before
    assert runner.resume("t", answer="yes").values["notes"] == NOTES_DONE


def test_fork_into_the_same_thread_reruns_from_that_checkpoint(
    runner: Runner, saver: Any, modules: Modules
) -> None:
    run_to_review(runner, modules)
    runner.resume("t", answer="yes")
    history = checkpoints(saver, "t")
    # the checkpoint after intake: triage is next
    [(after_intake, _)] = [(cid, m) for cid, m in history if m["step"] == 1]

    fork = runner.fork("t", after_intake)
    assert (fork.thread_id, fork.source_thread_id, fork.source_checkpoint_id) == (
        "t",
        "t",
        after_intake,
    )
    assert fork.next == ("triage",)
    latest = checkpoints(saver, "t")
    assert latest[1:] == history  # every earlier checkpoint is kept
    fork_id, fork_meta = latest[0]
    assert fork_id == fork.checkpoint_id
    assert fork_meta["source"] == "fork"
    assert fork_meta["statekeeper_forked_from"] == after_intake
    assert fork_meta["statekeeper_graph"] == modules.ref
    assert fork_meta["step"] == 2

    assert runner.resume("t").next == ("review",)
    done = runner.resume("t", answer="no")
    assert done.values["notes"] == ["intake", "triage p3", "review no", "closed"]
    assert modules.calls() == Counter(intake=1, triage=2, review=4, close=2)


def test_fork_into_a_new_thread_copies_the_history(
    runner: Runner, saver: Any, modules: Modules
) -> None:
    first = run_to_review(runner, modules)
    runner.resume("t", answer="yes")
    original = checkpoints(saver, "t")

    fork = runner.fork("t", first.checkpoint_id, to_thread="copy")
    assert fork.thread_id == "copy"
    assert fork.next == ("review",)
    assert checkpoints(saver, "t") == original  # the source is untouched
    copied = checkpoints(saver, "copy")
    # the history up to the forked checkpoint, same ids and metadata, plus the fork
    upto = [cid for cid, _ in original].index(first.checkpoint_id)
    assert copied[1:] == original[upto:]
    assert copied[0][1]["statekeeper_forked_from_thread"] == "t"

    # resuming the copy runs review again, which asks again; the answer goes there
    asked = runner.resume("copy")
    assert asked.status == "interrupted"
    assert [i.value["question"] for i in asked.interrupts] == ["approve?"]
    done = runner.resume("copy", answer="maybe")
    assert done.values["notes"] == ["intake", "triage p3", "review maybe", "closed"]
    assert runner.state("t").notes == NOTES_DONE  # type: ignore[union-attr]
    with pytest.raises(ThreadExistsError, match="'copy'"):
        runner.fork("t", first.checkpoint_id, to_thread="copy")
    with pytest.raises(ThreadNotFoundError, match="checkpoint 'nope'"):
        runner.fork("t", "nope", to_thread="other")
    assert checkpoints(saver, "other") == []


@pytest.mark.parametrize("ref", [None, 5])
def test_run_with_a_reference_that_is_not_text(runner: Runner, saver: Any, ref: Any) -> None:
    with pytest.raises(GraphLoadError, match=r"a graph reference is 'package\.module:attr' text"):
        runner.run(ref, {}, thread_id="x")
    assert checkpoints(saver, "x") == []


def test_invalid_input_is_one_line_with_every_problem_listed(
    runner: Runner, saver: Any, modules: Modules
) -> None:
    ref = modules.write(V1)
    bad = {"customer": 5, "priority": "3", "nokey": 1, "other": 2}
    with pytest.raises(InvalidInputError) as e:
        runner.run(ref, bad, thread_id="t")
    message = str(e.value)
    assert "\n" not in message
    assert message == (
        f"the input of graph {ref!r} does not fit Ticket; nothing was run or written: "
        "nokey: not a field of Ticket (its fields: messages, notes, customer, legacy_flag, "
        "priority) (and 2 more)"
    )
    assert [path for path, _ in e.value.errors] == ["nokey", "other", "customer"]
    assert e.value.field == "nokey"
    assert checkpoints(saver, "t") == []
