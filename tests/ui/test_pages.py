"""Every page of the inspector and its JSON twin, on every backend, over the threads and
notes of ``conftest.populate_*``: what each shows, that it never writes, and that stored
strings are text, never markup."""

from __future__ import annotations

import re
from typing import Any

import pytest
from markupsafe import escape

from statekeeper.ui.security import CSP
from tests.ui.conftest import (
    HOSTILE_ID,
    HOSTILE_TEXT,
    NOTES_NS,
    REF,
    Dataset,
    client_for,
    make_app,
)

# every raw form an attacker's string could take in a page; the pages must show none
RAW_MARKUP = ("<script>alert", "<img src=x", "<b>k</b>")


@pytest.fixture(scope="module")
def client(dataset: Dataset) -> Any:
    return client_for(make_app(dataset))


def _api(client: Any, path: str, **params: Any) -> Any:
    response = client.get(f"/api{path}", params=params)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    return response.json()


def _page(client: Any, path: str, **params: Any) -> str:
    response = client.get(path, params=params)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/html")
    assert response.headers["content-security-policy"] == CSP
    text = response.text
    for raw in RAW_MARKUP:
        assert raw not in text, f"{path} shows stored markup unescaped: {raw}"
    return text


def _stored(dataset: Dataset) -> list[tuple[Any, ...]]:
    return sorted(
        (t.config["configurable"]["thread_id"], t.config["configurable"]["checkpoint_ns"],
         t.checkpoint["id"], len(t.pending_writes or ()))
        for t in dataset.saver.list(None)
    )  # fmt: skip


# -- threads ------------------------------------------------------------------------------


def test_threads_lists_every_thread_with_its_status(client: Any) -> None:
    data = _api(client, "/threads")
    statuses = {row["thread_id"]: row["status"] for row in data["threads"]}
    assert statuses == {
        "done": "done",
        "waiting": "interrupted",
        "forked": "done",
        HOSTILE_ID: "interrupted",
    }
    assert data["cursor"] is None
    waiting = next(row for row in data["threads"] if row["thread_id"] == "waiting")
    assert (waiting["next"], waiting["graph"]) == (["ask"], REF)
    # newest first: the hostile thread was written last
    assert data["threads"][0]["thread_id"] == HOSTILE_ID
    text = _page(client, "/threads")
    for thread_id in ("done", "waiting", "forked"):
        assert f'href="/thread?thread={thread_id}"' in text
    # the bidi override is shown as a mark, not applied
    assert escape('<script>alert("id")</script>\'"') in text
    assert '<span class="ctl">&lt;U+202E&gt;</span>txt.exe' in text
    assert "\u202e" not in text


def test_the_same_page_answers_json_when_asked(client: Any) -> None:
    response = client.get("/threads", headers={"accept": "application/json"})
    assert response.headers["content-type"] == "application/json"
    assert response.json() == _api(client, "/threads")


def test_a_thread_a_live_run_holds_is_listed_as_running(dataset: Dataset, client: Any) -> None:
    def statuses() -> dict[str, str]:
        return {row["thread_id"]: row["status"] for row in _api(client, "/threads")["threads"]}

    with dataset.saver.claim_thread("done"):
        assert statuses()["done"] == "running"
        assert _api(client, "/thread", thread="done")["summary"]["status"] == "running"
    assert statuses()["done"] == "done"


def test_threads_pages_with_a_cursor_until_the_last(client: Any) -> None:
    seen, cursor = [], None
    while True:
        data = _api(client, "/threads", limit=3, **({"cursor": cursor} if cursor else {}))
        seen += [row["thread_id"] for row in data["threads"]]
        cursor = data["cursor"]
        if cursor is None:
            break
    assert seen == [row["thread_id"] for row in _api(client, "/threads")["threads"]]
    assert len(seen) == 4
    text = _page(client, "/threads", limit=3)
    assert 'rel="next"' in text


def test_threads_search_by_id_and_by_metadata(client: Any) -> None:
    by_id = _api(client, "/threads", q="ORK")
    assert [row["thread_id"] for row in by_id["threads"]] == ["forked"]
    by_meta = _api(client, "/threads", meta="note=<script>alert('meta')</script>")
    assert [row["thread_id"] for row in by_meta["threads"]] == [HOSTILE_ID]
    assert _api(client, "/threads", meta="source=fork")["threads"][0]["thread_id"] == "forked"
    assert "No thread matches." in _page(client, "/threads", q="no-such-thread")


def test_a_bad_search_is_a_400_page(client: Any) -> None:
    response = client.get("/threads", params={"meta": "novalue"})
    assert response.status_code == 400
    assert "key=value" in response.text
    assert client.get("/api/threads", params={"limit": "0"}).json()["error"] == "ConfigurationError"


def _title(text: str) -> str:
    found = re.search(r"<title>(.*?)</title>", text, re.DOTALL)
    assert found is not None, "the page has no <title>"
    return found.group(1)


@pytest.mark.parametrize(
    ("path", "params", "message"),
    [
        ("/threads", {"limit": "\u00b2"}, "limit must be a number from 1 to 500"),
        ("/threads", {"limit": "\u0661"}, "limit must be a number from 1 to 500"),
        ("/memory/notes", {"ns": "notes", "offset": "\u00b2"}, "offset must be a number"),
        ("/memory/notes", {"ns": "notes", "offset": "\uff15"}, "offset must be a number"),
    ],
    ids=["limit-superscript", "limit-arabic", "offset-superscript", "offset-fullwidth"],
)
def test_a_number_in_other_digits_is_a_400_like_any_bad_number(
    client: Any, path: str, params: dict[str, str], message: str
) -> None:
    """``str.isdigit`` takes '²' (which ``int`` refuses) and ``int`` takes '١' and '５':
    a number in a query is ASCII digits, anything else the same 400 as ``limit=x``."""
    page = client.get(path, params=params)
    assert page.status_code == 400, page.text
    assert message in page.text
    api = client.get(f"/api{path}", params=params)
    assert api.status_code == 400, api.text
    assert api.json()["error"] == "ConfigurationError"
    assert api.json()["message"].startswith(message)


# -- a thread -----------------------------------------------------------------------------


def _nodes(branch: list[dict[str, Any]]) -> list[dict[str, Any]]:
    found = []
    for node in branch:
        found.append(node)
        for other in node["branches"]:
            found += _nodes(other)
    return found


def test_a_forked_thread_is_a_tree_with_its_head_marked(client: Any, dataset: Dataset) -> None:
    data = _api(client, "/thread", thread="forked")
    root, *subgraphs = data["namespaces"]
    assert root["checkpoint_ns"] == ""
    (main,) = root["branches"]
    fork_point = next(node for node in main if node["branches"])
    assert fork_point["checkpoint_id"] == dataset.fork_source
    # the branch the head is on continues the main line; the first run is the side branch
    (side,) = fork_point["branches"]
    assert side[0]["ran"] == ["ask"]
    assert side[0]["source"] == "loop"
    after = main[main.index(fork_point) + 1]
    assert after["source"] == "fork"
    assert after["ran"] == []
    heads = [node for node in _nodes(main) if node["head"]]
    assert [node["checkpoint_id"] for node in heads] == [main[-1]["checkpoint_id"]]
    assert main[-1]["ran"] == ["finish"]
    assert len(_nodes(main)) == root["count"]
    # subgraph checkpoints are grouped under their namespaces
    assert subgraphs
    assert all(ns["checkpoint_ns"].startswith("research:") for ns in subgraphs)
    text = _page(client, "/thread", thread="forked")
    assert text.count('class="fork-branch"') == 1
    assert text.count('class="badge head"') == 1 + len(subgraphs)
    assert "subgraph <code>research:" in text


def test_a_waiting_thread_shows_its_interrupt(client: Any) -> None:
    data = _api(client, "/thread", thread="waiting")
    assert data["summary"]["status"] == "interrupted"
    assert data["interrupts"][0]["value"] == {
        "question": "Send the reply?",
        "draft": "looked it up",
    }
    text = _page(client, "/thread", thread="waiting")
    assert "Waiting at an interrupt()" in text
    assert "/actions/resume" not in text  # read-only: no form


def test_an_unknown_thread_is_a_404_page(client: Any) -> None:
    response = client.get("/thread", params={"thread": "nope"})
    assert response.status_code == 404
    assert "ThreadNotFoundError" in response.text
    api = client.get("/api/thread", params={"thread": "nope"})
    assert (api.status_code, api.json()["error"]) == (404, "ThreadNotFoundError")


# -- a checkpoint -------------------------------------------------------------------------


def test_a_checkpoint_shows_state_chat_diff_writes_and_metadata(
    client: Any, dataset: Dataset
) -> None:
    data = _api(client, "/checkpoint", thread="done")
    assert data["checkpoint_id"] == dataset.done_head
    assert data["metadata"]["statekeeper_graph"] == REF
    assert [m["type"] for m in data["state"]["messages"]] == ["human", "ai", "tool", "ai", "ai"]
    assert data["state"]["answer"] == "yes"
    assert data["ran"] == ["finish"]
    assert data["next"] == []
    (change,) = data["diff"]["changes"]
    assert (change["channel"], change["kind"]) == ("messages", "appended")
    assert change["new"][0]["content"] == "(reply sent)"
    assert change["count_before"] == 4
    assert change["count_after"] == 5
    assert change["size_after"] > change["size_before"]
    text = _page(client, "/checkpoint", thread="done")
    assert 'class="chat"' in text
    assert 'class="msg role-ai"' in text
    assert "calls <b><bdi>lookup</bdi></b>" in text
    assert 'answers <code class="mid">call-1</code>' in text
    assert 'id="diff"' in text
    assert "appended" in text


def test_a_threads_page_links_to_its_head_in_the_history(client: Any, dataset: Dataset) -> None:
    """The history runs oldest first: a long thread's head was pages down, unlinked."""
    text = _page(client, "/thread", thread="forked")
    assert '<a href="#head">in the history ↓</a>' in text
    assert text.count(' id="head"') == 1  # the root graph's head only
    head = re.search(r'<li class="cp head[^"]*" id="head" data-checkpoint="([^"]+)"', text)
    assert head is not None
    assert head.group(1) == _api(client, "/thread", thread="forked")["namespaces"][0]["head"]


def test_a_checkpoint_links_to_the_history_and_the_newest(client: Any, dataset: Dataset) -> None:
    head = _api(client, "/checkpoint", thread="done")
    assert head["head_id"] == dataset.done_head
    text = _page(client, "/checkpoint", thread="done")
    assert '<a href="/thread?thread=done#ns-root">history</a>' in text
    assert 'id="to-head" href="/checkpoint?thread=done">newest (this one)</a>' in text
    older = _api(client, "/checkpoint", thread="done", id=head["parent_id"])
    assert older["head_id"] == dataset.done_head
    text = _page(client, "/checkpoint", thread="done", id=head["parent_id"])
    assert 'id="to-head" href="/checkpoint?thread=done">newest</a>' in text


def test_a_diff_against_any_chosen_checkpoint(client: Any, dataset: Dataset) -> None:
    data = _api(client, "/checkpoint", thread="forked", against=dataset.fork_source)
    assert data["diff"]["against"] == dataset.fork_source
    assert data["ran"] == ["finish"]  # still read from its parent
    kinds = {c["channel"]: c["kind"] for c in data["diff"]["changes"]}
    assert kinds == {"answer": "added", "messages": "appended"}
    first = _api(client, "/checkpoint", thread="done", id=_oldest(dataset, "done"))
    assert first["diff"]["against"] is None
    assert first["parent_id"] is None


def test_a_checkpoint_is_named_as_the_cli_names_it(client: Any, dataset: Dataset) -> None:
    """``?id=`` and ``?against=`` take what ``statekeeper show`` takes (statekeeper.refs)."""
    from statekeeper.refs import short_ids

    config = {"configurable": {"thread_id": "done", "checkpoint_ns": ""}}
    listed = list(dataset.saver.list(config))
    short = short_ids(t.checkpoint["id"] for t in listed)
    head = _api(client, "/checkpoint", thread="done")
    assert _api(client, "/checkpoint", thread="done", id="~1")["checkpoint_id"] == head["parent_id"]
    assert _api(client, "/checkpoint", thread="done", id="@-1")["parent_id"] is None
    for tup in listed:
        by_short = _api(client, "/checkpoint", thread="done", id=short[tup.checkpoint["id"]])
        assert by_short["checkpoint_id"] == tup.checkpoint["id"]
    diffed = _api(client, "/checkpoint", thread="done", against="head~2")
    assert (
        diffed["diff"]["against"]
        == _api(client, "/checkpoint", thread="done", id="~2")["checkpoint_id"]
    )
    shared = dataset.done_head[:4]
    ambiguous = client.get("/api/checkpoint", params={"thread": "done", "id": shared})
    assert (ambiguous.status_code, ambiguous.json()["error"]) == (400, "AmbiguousReferenceError")
    missing = client.get("/api/checkpoint", params={"thread": "done", "id": "@99"})
    assert (missing.status_code, missing.json()["error"]) == (404, "ThreadNotFoundError")


def _oldest(dataset: Dataset, thread_id: str) -> str:
    config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    return min(t.checkpoint["id"] for t in dataset.saver.list(config))


def test_pending_writes_flag_the_interrupt(client: Any) -> None:
    data = _api(client, "/checkpoint", thread="waiting")
    flagged = [task for task in data["pending_writes"] if task["interrupted"]]
    assert len(flagged) == 1
    assert flagged[0]["writes"][0]["channel"] == "__interrupt__"
    assert data["interrupts"][0]["value"]["question"] == "Send the reply?"
    text = _page(client, "/checkpoint", thread="waiting")
    assert "task-interrupted" in text


def test_a_subgraph_checkpoint_has_its_own_page(client: Any) -> None:
    thread = _api(client, "/thread", thread="done")
    ns = thread["namespaces"][1]
    data = _api(client, "/checkpoint", thread="done", ns=ns["checkpoint_ns"], id=ns["head"])
    assert data["checkpoint_ns"] == ns["checkpoint_ns"]
    assert data["state"]["messages"][-1]["content"] == "looked it up"
    _page(client, "/checkpoint", thread="done", ns=ns["checkpoint_ns"], id=ns["head"])


def test_hostile_strings_are_text_on_every_page_that_shows_them(client: Any) -> None:
    text = _page(client, "/checkpoint", thread=HOSTILE_ID)
    assert escape(HOSTILE_TEXT) in text  # the message, as text
    assert "&lt;b&gt;k&lt;/b&gt;" in text  # a metadata key
    assert escape("<script>alert('meta')</script>") in text
    _page(client, "/thread", thread=HOSTILE_ID)
    _page(client, "/interrupts")
    data = _api(client, "/checkpoint", thread=HOSTILE_ID)
    assert data["state"]["messages"][0]["content"] == HOSTILE_TEXT  # JSON keeps it exact


# -- interrupts, graph, memory ------------------------------------------------------------


def test_interrupts_lists_the_waiting_threads_with_what_they_ask(client: Any) -> None:
    data = _api(client, "/interrupts")
    assert sorted(row["thread_id"] for row in data["waiting"]) == sorted(["waiting", HOSTILE_ID])
    assert data["waiting"][0]["interrupts"][0]["value"]["question"] == "Send the reply?"
    assert data["unfinished"] == []
    assert data["unreadable"] == []
    text = _page(client, "/interrupts")
    assert "Send the reply?" in text
    assert "/actions/resume" not in text


def test_the_graph_of_a_thread_with_its_next_node(client: Any) -> None:
    data = _api(client, "/graph", thread="waiting")
    assert data["ref"] == REF
    assert data["next"] == ["ask"]
    assert data["current"] == ["research"]
    assert {"agent", "tools", "research", "ask", "finish"} <= set(data["nodes"])
    assert {"source": "ask", "target": "finish", "conditional": False} in data["edges"]
    text = _page(client, "/graph", thread="waiting")
    assert 'id="graph-svg"' in text
    assert '<g class="node next" id="sk-node-ask" data-node="ask">' in text
    assert '<g class="node current" id="sk-node-research" data-node="research">' in text
    assert 'class="graph-node is-next"><bdi>ask</bdi>' in text
    assert "<script" not in data["svg"]
    empty = _page(client, "/graph")
    assert "No graph to draw" in empty


def test_the_graph_page_says_when_it_draws_another_graph_than_the_threads(
    dataset: Dataset,
) -> None:
    """With ``--graph`` naming another graph, the page drew it with the thread's nodes
    lit as if they were its own; now it says which graph the thread names, and which of
    the thread's nodes the drawn graph lacks."""
    other = "tests.graphs.counter_graph:graph"
    client = client_for(make_app(dataset, graph_ref=other))
    data = _api(client, "/graph", thread="waiting")
    assert (data["ref"], data["named"], data["missing"]) == (other, REF, ["research", "ask"])
    text = _page(client, "/graph", thread="waiting")
    assert 'id="graph-mismatch"' in text
    assert f"names the graph <code>{REF}</code>, not this one" in text
    own = client_for(make_app(dataset, graph_ref=REF))
    assert _api(own, "/graph", thread="waiting")["named"] is None
    assert 'id="graph-mismatch"' not in _page(own, "/graph", thread="waiting")


def test_an_unknown_namespace_of_a_thread_is_said_as_such(client: Any) -> None:
    """It said "no thread 'waiting' (namespace 'nope')", of a thread that exists."""
    response = client.get("/checkpoint", params={"thread": "waiting", "ns": "nope"})
    assert response.status_code == 404
    said = "no namespace 'nope' in thread 'waiting'; it has '' (the root graph), 'research:"
    assert said.replace("'", "&#39;") in response.text
    gone = client.get("/checkpoint", params={"thread": "nope", "ns": "x"})
    assert gone.status_code == 404
    assert "no thread &#39;nope&#39;" in gone.text


def test_memory_shows_namespaces_and_stats(client: Any) -> None:
    data = _api(client, "/memory")
    assert list(NOTES_NS) in data["namespaces"]
    assert ["misc"] in data["namespaces"]
    assert all(ns[:2] == ["statekeeper", "log"] for ns in data["log_namespaces"])
    overall = data["stats"]["overall"]
    assert (overall["recalls"], overall["compactions"], overall["tokens_saved"]) == (3, 1, 520)
    text = _page(client, "/memory")
    assert text.count('<figure class="chart">') == 3
    assert len(re.findall(r'<rect class="bar"', text)) == 2 + 2 + 1  # hit, stale, saved


def test_notes_show_provenance_validity_and_supersede_chains(client: Any, dataset: Dataset) -> None:
    data = _api(client, "/memory/notes", ns=list(NOTES_NS))
    by_key = {item["key"]: item for item in data["items"]}
    old, new = by_key[dataset.note_keys["old"]], by_key[dataset.note_keys["new"]]
    assert old["note"]["superseded_by"] == new["key"]
    assert old["holds_now"] is False
    assert new["note"]["supersedes"] == [old["key"]]
    assert new["holds_now"] is True
    assert new["note"]["provenance"]["checkpoint_id"] == dataset.done_head
    text = _page(client, "/memory/notes", ns=list(NOTES_NS))
    assert escape(HOSTILE_TEXT) in text
    assert f"id={dataset.done_head}" in text  # a link to the source checkpoint
    note = _api(client, "/memory/note", ns=list(NOTES_NS), key=new["key"])
    assert [link["key"] for link in note["supersede_chain"]] == [old["key"], new["key"]]
    assert "Supersede chain" in _page(client, "/memory/note", ns=list(NOTES_NS), key=old["key"])
    plain = _api(client, "/memory/notes", ns=["misc"])["items"][0]
    assert (plain["note"], plain["value"]) == (None, {"hello": "<i>world</i>"})
    assert "&lt;i&gt;world&lt;/i&gt;" in _page(client, "/memory/notes", ns=["misc"])
    missing = client.get("/memory/note", params={"ns": "misc", "key": "nope"})
    assert missing.status_code == 404


@pytest.mark.parametrize(
    "ns",
    [["a.b"], ["../.."], ["x\x00y"], ["notes", "done.x"]],
    ids=["period", "dotdot", "nul", "deeper"],
)
@pytest.mark.parametrize("path", ["/memory/notes", "/memory/note"])
def test_a_namespace_the_store_refuses_is_a_400(client: Any, path: str, ns: list[str]) -> None:
    """LangGraph's stores refuse labels holding '.' or NUL (``InvalidNamespaceError``):
    that is bad input, answered like a bad thread id, with what a label may hold."""
    params = {"ns": ns, "key": "k"}
    page = client.get(path, params=params)
    assert page.status_code == 400, page.text
    assert "InvalidIdError" in page.text
    assert "\x00" not in page.text
    api = client.get(f"/api{path}", params=params)
    assert api.status_code == 400, api.text
    error = api.json()
    assert error["error"] == "InvalidIdError"
    assert "'.'" in error["message"]
    assert "\n" not in error["message"]
    assert "\x00" not in error["message"]


def test_titles_mark_control_characters_as_the_page_body_does(client: Any) -> None:
    """A tab or history title cannot be spoofed: the ``<title>`` shows bidi and
    zero-width characters as the same ``<U+202E>`` marks as the body."""
    title = _title(_page(client, "/thread", thread=HOSTILE_ID))
    assert "\u202e" not in title
    assert "&lt;U+202E&gt;txt.exe · statekeeper" in title
    assert _api(client, "/thread", thread=HOSTILE_ID)["thread_id"] == HOSTILE_ID  # JSON: exact
    ns = "unicode-\u202eevil-\u200b-x"
    text = _page(client, "/memory/notes", ns=ns)
    assert _title(text) == "Notes in unicode-&lt;U+202E&gt;evil-&lt;U+200B&gt;-x · statekeeper"
    assert "\u202e" not in text
    assert "\u200b" not in text
    assert _api(client, "/memory/notes", ns=ns)["namespace"] == [ns]


def test_unknown_paths_are_404_pages(client: Any) -> None:
    response = client.get("/nowhere")
    assert response.status_code == 404
    assert "<html" in response.text
    assert client.get("/api/nowhere").json()["status"] == 404


def test_no_page_writes(client: Any, dataset: Dataset) -> None:
    before = _stored(dataset)
    items_before = len(dataset.store.search((), limit=1000))
    for path in ("/threads", "/thread", "/checkpoint", "/interrupts", "/graph"):
        for thread_id in ("done", "waiting", "forked", HOSTILE_ID):
            client.get(path, params={"thread": thread_id})
            client.get("/api" + path, params={"thread": thread_id})
    client.get("/memory")
    client.get("/memory/notes", params={"ns": list(NOTES_NS)})
    assert _stored(dataset) == before
    assert len(dataset.store.search((), limit=1000)) == items_before


def test_the_graph_page_imports_no_module_that_stored_data_names(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A thread whose metadata names a module nobody imported: the page says how to draw
    it and imports nothing (the module would write a marker, and is importable)."""
    import sys
    import uuid

    from langgraph.checkpoint.conformance.test_utils import generate_checkpoint

    from statekeeper.checkpointers import open_checkpointer

    module = f"sk_planted_{uuid.uuid4().hex}"
    marker = tmp_path / "imported"
    (tmp_path / f"{module}.py").write_text(f"open({str(marker)!r}, 'w').close()\ngraph = None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    ref = f"{module}:graph"
    with open_checkpointer(f"sqlite:///{tmp_path}/planted.db") as saver:
        config = {"configurable": {"thread_id": "planted", "checkpoint_ns": ""}}
        saver.put(config, generate_checkpoint(), {"statekeeper_graph": ref}, {})
        client = client_for(make_app(Dataset(url="sqlite", saver=saver, store=None)))
        data = _api(client, "/graph", thread="planted")
        assert (data["ref"], data["not_imported"], data["svg"]) == (ref, True, None)
        text = _page(client, "/graph", thread="planted")
        assert "which is not\nimported" in text
        assert f"statekeeper ui --db sqlite --graph {ref}" in text  # the storage it shows
    assert module not in sys.modules
    assert not marker.exists()
