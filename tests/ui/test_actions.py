"""``--write``: answering an interrupt and forking, on every backend, through the same
runner the CLI uses, with its refusals shown as pages with the right status."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from langchain_core.messages import AIMessage

from statekeeper.graphs import Runner
from tests.ui.conftest import BASE, QUESTION, REF, Dataset, client_for, make_app

SAME_ORIGIN = {"origin": BASE}


@pytest.fixture
def waiting(fresh: Dataset) -> Dataset:
    Runner(fresh.saver).run(REF, QUESTION, thread_id="t")
    return fresh


@pytest.fixture
def client(waiting: Dataset) -> Any:
    return client_for(make_app(waiting, write=True))


def _head(data: Dataset, thread_id: str = "t") -> Any:
    return data.saver.get_tuple({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}})


def _post(client: Any, path: str, **form: str) -> Any:
    return client.post(path, data=form, headers=SAME_ORIGIN)


def _before_ask(data: Dataset) -> str:
    from statekeeper.threads import pending_nodes

    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    return min(
        t.checkpoint["id"]
        for t in data.saver.list(config)
        if pending_nodes(t.checkpoint) == ("ask",)
    )


def test_answering_an_interrupt_resumes_the_thread(client: Any, waiting: Dataset) -> None:
    response = _post(client, "/actions/resume", thread="t", mode="answer", answer="yes")
    assert response.status_code == 303
    assert response.headers["location"] == "/thread?thread=t&did=answered"
    state = _head(waiting).checkpoint["channel_values"]
    assert state["answer"] == "yes"
    assert state["messages"][-1].content == "(reply sent)"
    page = client.get(response.headers["location"]).text
    assert 'class="status status-done"' in page
    # the page says what the action did (it said nothing: a no-op looked the same)
    said = r'id="did"[^>]*>\s*Answered and resumed: the thread is now\s*<span class="status '
    assert re.search(said + "status-done", page)
    assert "back to the interrupts" not in page


def test_an_answer_from_the_interrupts_page_leads_back_to_it(client: Any, waiting: Dataset) -> None:
    listed = client.get("/interrupts").text
    assert '<input type="hidden" name="back" value="interrupts">' in listed
    response = _post(client, "/actions/resume", thread="t", answer="no", back="interrupts")
    assert response.headers["location"] == "/thread?thread=t&did=answered&back=interrupts"
    page = client.get(response.headers["location"]).text
    assert '<a href="/interrupts">← back to the interrupts</a>' in page
    # only known words are shown: nothing else from the query string reaches the page
    odd = client.get("/thread", params={"thread": "t", "did": "<b>x</b>", "back": "//evil"})
    assert 'id="did"' not in odd.text


def test_the_json_twin_answers_with_the_run_result(client: Any, waiting: Dataset) -> None:
    response = client.post(
        "/api/actions/resume", json={"thread": "t", "answer": {"ok": True}}, headers=SAME_ORIGIN
    )
    assert response.status_code == 200
    result = response.json()
    assert (result["thread_id"], result["status"], result["next"]) == ("t", "done", [])
    assert _head(waiting).checkpoint["channel_values"]["answer"] == "{'ok': True}"


@pytest.mark.parametrize(
    ("form", "status", "error"),
    [
        ({"mode": "continue"}, 409, "AnswerRequiredError"),
        ({"mode": "answer", "answer": "yes", "thread": "nope"}, 404, "ThreadNotFoundError"),
    ],
)
def test_refusals_are_pages_with_their_status(
    client: Any, waiting: Dataset, form: dict[str, str], status: int, error: str
) -> None:
    before = _head(waiting).checkpoint["id"]
    response = _post(client, "/actions/resume", **{"thread": "t", **form})
    assert response.status_code == status
    assert error in response.text
    assert _head(waiting).checkpoint["id"] == before


def test_a_finished_thread_is_not_resumed_again(client: Any, waiting: Dataset) -> None:
    _post(client, "/actions/resume", thread="t", mode="answer", answer="yes")
    again = _post(client, "/actions/resume", thread="t", mode="answer", answer="yes")
    assert again.status_code == 409
    assert "NothingToResumeError" in again.text


def test_fork_with_edited_state_keeps_unedited_fields_exactly(
    client: Any, waiting: Dataset
) -> None:
    source = _before_ask(waiting)
    shown = client.get("/api/checkpoint", params={"thread": "t", "id": source}).json()["state"]
    edited = {**shown, "answer": "edited"}
    response = _post(
        client, "/actions/fork", thread="t", checkpoint=source, values=json.dumps(edited)
    )
    assert response.status_code == 303
    head = _head(waiting)
    assert head.metadata["source"] == "fork"
    assert head.metadata["statekeeper_forked_from"] == source
    assert head.checkpoint["channel_values"]["answer"] == "edited"
    messages = head.checkpoint["channel_values"]["messages"]
    assert isinstance(messages[1], AIMessage)
    assert messages[1].tool_calls[0]["id"] == "call-1"
    stored = waiting.saver.get_tuple(
        {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": source}}
    )
    # the messages were shown unchanged: the fork did not write a new version of them
    assert (
        head.checkpoint["channel_versions"]["messages"]
        == stored.checkpoint["channel_versions"]["messages"]
    )
    (main,) = client.get("/api/thread", params={"thread": "t"}).json()["namespaces"][0]["branches"]
    assert (main[-1]["source"], main[-1]["head"], main[-2]["checkpoint_id"]) == (
        "fork",
        True,
        source,
    )


def test_fork_with_the_state_as_shown_is_an_exact_copy(client: Any, waiting: Dataset) -> None:
    source = _before_ask(waiting)
    shown = client.get("/api/checkpoint", params={"thread": "t", "id": source}).json()["state"]
    _post(client, "/actions/fork", thread="t", checkpoint=source, values=json.dumps(shown))
    stored = waiting.saver.get_tuple(
        {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": source}}
    )
    assert _head(waiting).checkpoint["channel_versions"] == stored.checkpoint["channel_versions"]


def test_fork_into_another_thread_then_answer_there(client: Any, waiting: Dataset) -> None:
    response = _post(
        client, "/actions/fork", thread="t", checkpoint=_before_ask(waiting), to="copy"
    )
    assert response.headers["location"] == "/thread?thread=copy&did=forked"
    data = client.get("/api/thread", params={"thread": "copy"}).json()
    assert data["forked_from_thread"] == "t"
    _post(client, "/actions/resume", thread="copy", mode="continue")  # asks again
    done = _post(client, "/actions/resume", thread="copy", mode="answer", answer="yes")
    assert done.status_code == 303
    assert _head(waiting, "copy").checkpoint["channel_values"]["answer"] == "yes"
    assert _head(waiting).checkpoint["channel_values"].get("answer") is None  # t still waits
    # once the fork ran on, the page still says where it came from (it forgot)
    after = client.get("/api/thread", params={"thread": "copy"}).json()
    source = _before_ask(waiting)
    assert (after["forked_from_thread"], after["forked_from_checkpoint"]) == ("t", source)
    page = client.get("/thread", params={"thread": "copy"}).text
    assert f'href="/checkpoint?thread=t&amp;id={source}"' in page


def test_fork_takes_a_checkpoint_reference(client: Any, waiting: Dataset) -> None:
    """The fork form's checkpoint is read as ``statekeeper fork`` reads it."""
    response = _post(client, "/actions/fork", thread="t", checkpoint="head~1", to="by-ref")
    assert response.status_code == 303, response.text
    parent = _head(waiting).parent_config["configurable"]["checkpoint_id"]
    assert _head(waiting, "by-ref").metadata["statekeeper_forked_from"] == parent


@pytest.mark.parametrize(
    ("values", "status", "error"),
    [
        ("{not json", 400, "the edited state is not JSON"),
        ("[1, 2]", 400, "must be a JSON object"),
        ('{"answer": 5}', 422, "StateValidationError"),
    ],
)
def test_bad_edited_state_is_refused_before_anything_is_written(
    client: Any, waiting: Dataset, values: str, status: int, error: str
) -> None:
    before = _head(waiting).checkpoint["id"]
    response = _post(
        client, "/actions/fork", thread="t", checkpoint=_before_ask(waiting), values=values
    )
    assert response.status_code == status
    assert error in response.text
    assert _head(waiting).checkpoint["id"] == before


def test_a_node_that_raises_is_a_page_saying_the_thread_kept_its_step(
    client: Any, waiting: Dataset
) -> None:
    source = _before_ask(waiting)
    _post(client, "/actions/fork", thread="t", checkpoint=source, values='{"messages": []}')
    response = _post(client, "/actions/resume", thread="t", mode="continue")
    assert response.status_code == 500
    assert "the graph raised IndexError" in response.text
    assert "keeps its last completed step" in response.text
    assert _head(waiting).metadata["source"] == "fork"
    # the thread and the interrupts pages say which node raised what (they said nothing)
    page = client.get("/thread", params={"thread": "t"}).text
    assert 'id="failed"' in page
    assert '<span class="node-name failed">ask</span>: <code class="message">IndexError(' in page
    data = client.get("/api/thread", params={"thread": "t"}).json()
    [failure] = data["failures"]
    assert (failure["node"], failure["error"].split("(")[0]) == ("ask", "IndexError")
    listed = client.get("/interrupts").text
    assert 'ask raised <code class="message">IndexError(' in listed


@pytest.mark.parametrize(
    ("values", "error"),
    [
        ({"messages": [{"role": "user", "content": "added"}]}, "field 'messages': TypeError"),
        ({"messages": [{"bogus": 1}]}, "field 'messages': TypeError"),
        ({"__start__": 1}, "not channels of Chat: '__start__'"),
        ({"nosuch": 1}, "not channels of Chat: 'nosuch' (it has: 'messages', 'answer')"),
    ],
)
@pytest.mark.parametrize("to", ["", "copy"])
def test_edited_state_the_schema_does_not_have_is_a_422_and_writes_nothing(
    client: Any, waiting: Dataset, values: dict[str, Any], error: str, to: str
) -> None:
    def stored(thread_id: str) -> list[str]:
        config = {"configurable": {"thread_id": thread_id}}
        return [t.checkpoint["id"] for t in waiting.saver.list(config)]

    before = stored("t")
    response = client.post(
        "/api/actions/fork",
        json={"thread": "t", "checkpoint": _before_ask(waiting), "to": to, "values": values},
        headers=SAME_ORIGIN,
    )
    assert response.status_code == 422, response.text
    assert response.json()["error"] == "StateValidationError"
    assert error in response.json()["message"]
    assert stored("t") == before
    assert stored("copy") == []
