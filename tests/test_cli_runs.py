"""The CLI's running and moving commands on the example agent (examples/approval_agent.py):
run, resume, fork, migrate, copy, export, import, and ``statekeeper demo`` end to end."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest

from statekeeper.checkpointers import open_checkpointer
from statekeeper.cli import EXIT, main
from statekeeper.errors import ReadOnlyError

ROOT = Path(__file__).resolve().parent.parent
AGENT = "examples.approval_agent:graph"
QUESTION = json.dumps({"messages": [{"role": "user", "content": "Where is order 1042?"}]})


@pytest.fixture(autouse=True)
def _importable_examples(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT))


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/state.db"


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any, str]:
    """Run ``statekeeper --json ARGV``; return the exit code, parsed stdout, stderr."""
    code = main(["--json", *argv])
    out, err = capsys.readouterr()
    return code, json.loads(out) if out.strip() else None, err


def start(capsys: Any, db: str, thread: str = "t1") -> Any:
    code, out, err = cli(capsys, "run", AGENT, "--db", db, "--thread", thread, "--input", QUESTION)
    assert code == EXIT["interrupted"], err
    return out


def test_run_stops_at_the_approval_and_resume_answers_it(db: str, capsys: Any) -> None:
    out = start(capsys, db)
    assert out["status"] == "interrupted"
    assert out["next"] == ["approve"]
    assert out["interrupts"][0]["value"]["question"] == "Send this reply?"

    code, out, err = cli(capsys, "resume", "t1", "--db", db, "--answer", "yes")
    assert code == EXIT["ok"], err
    assert out["status"] == "done"
    assert out["values"]["approved"] is True
    assert out["values"]["messages"][-1]["content"] == "(reply sent)"


def test_resume_without_an_answer_says_how_to_give_one(db: str, capsys: Any) -> None:
    start(capsys, db)
    code, _, err = cli(capsys, "resume", "t1", "--db", db)
    assert code == EXIT["interrupted"]
    assert "statekeeper resume t1 --answer VALUE" in err


def test_resume_refusals_have_their_own_exit_codes(db: str, capsys: Any) -> None:
    start(capsys, db)
    code, _, err = cli(capsys, "resume", "nobody", "--db", db)
    assert code == EXIT["not_found"], err
    code, _, err = cli(capsys, "run", AGENT, "--db", db, "--thread", "t1", "--input", QUESTION)
    assert code == EXIT["refused"], err  # the thread exists
    assert cli(capsys, "resume", "t1", "--db", db, "--answer", "no")[0] == EXIT["ok"]
    code, _, err = cli(capsys, "resume", "t1", "--db", db)
    assert code == EXIT["refused"]
    assert "finished" in err


def test_a_thread_claimed_by_another_run_is_busy(db: str, capsys: Any) -> None:
    start(capsys, db)
    with open_checkpointer(db) as other, other.claim_thread("t1"):
        code, _, err = cli(capsys, "resume", "t1", "--db", db, "--answer", "yes")
    assert code == EXIT["busy"]
    assert f"pid {os.getpid()}" in err
    assert cli(capsys, "resume", "t1", "--db", db, "--answer", "yes")[0] == EXIT["ok"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "no_such_module_here:graph"], "no_such_module_here"),
        (["run", "examples.approval_agent:nope"], "nope"),
        (["run", "not a reference"], "package.module:attr"),
        (["run", AGENT, "--input", "{not json"], "--input must be JSON"),
    ],
)
def test_bad_graph_references_and_input_are_usage_errors(
    db: str, capsys: Any, argv: list[str], message: str
) -> None:
    code, _, err = cli(capsys, *argv, "--db", db)
    assert code == EXIT["usage"]
    assert message in err


def test_a_failing_node_exits_1_and_the_thread_resumes_after_the_fix(
    db: str, tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = f"flaky_{uuid.uuid4().hex}"
    (tmp_path / f"{module}.py").write_text(
        textwrap.dedent(
            """
            import os
            from typing import TypedDict
            from langgraph.graph import StateGraph, START, END

            class S(TypedDict, total=False):
                log: list

            def first(s):
                return {"log": ["first"]}

            def second(s):
                if os.environ.get("FLAKY_BROKEN"):
                    raise RuntimeError("the service is down")
                return {"log": s["log"] + ["second"]}

            graph = StateGraph(S)
            graph.add_node(first)
            graph.add_node(second)
            graph.add_edge(START, "first")
            graph.add_edge("first", "second")
            graph.add_edge("second", END)
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("FLAKY_BROKEN", "1")
    code, _, err = cli(capsys, "run", f"{module}:graph", "--db", db, "--thread", "f1")
    assert code == EXIT["failed"]
    assert "RuntimeError: the service is down" in err
    assert "statekeeper resume f1" in err
    monkeypatch.delenv("FLAKY_BROKEN")
    code, out, err = cli(capsys, "resume", "f1", "--db", db)
    assert code == EXIT["ok"], err
    assert out["values"]["log"] == ["first", "second"]


def test_fork_an_earlier_checkpoint_into_a_new_thread(db: str, capsys: Any) -> None:
    start(capsys, db)
    cli(capsys, "resume", "t1", "--db", db, "--answer", "yes")
    _, history, _ = cli(capsys, "history", "t1", "--db", db)
    waiting = next(row for row in history if row["next"] == ["approve"])
    code, out, err = cli(capsys, "fork", "t1", waiting["checkpoint_id"], "--to", "t2", "--db", db)
    assert code == EXIT["ok"], err
    assert out["thread_id"] == "t2"
    assert out["next"] == ["approve"]
    # a fork copies the checkpoint, not its pending writes: approve runs and asks again
    code, out, err = cli(capsys, "resume", "t2", "--db", db)
    assert code == EXIT["interrupted"], err
    code, out, err = cli(capsys, "resume", "t2", "--db", db, "--answer", "no")
    assert code == EXIT["ok"], err
    assert out["values"]["messages"][-1]["content"] == "(reply discarded)"
    _, original, _ = cli(capsys, "show", "t1", "--db", db)
    assert original["values"]["approved"] is True  # the source thread is untouched


def test_migrate_reports_threads_already_current(db: str, capsys: Any) -> None:
    start(capsys, db)
    code, out, err = cli(capsys, "migrate", "--all", "--db", db)
    assert code == EXIT["ok"], err
    assert out == {"t1": None}


def test_copy_then_history_is_identical_on_the_target(db: str, tmp_path: Path, capsys: Any) -> None:
    start(capsys, db, "t1")
    start(capsys, db, "t2")
    target = f"file://{tmp_path}/copy"
    code, out, err = cli(capsys, "copy", db, target)
    assert code == EXIT["ok"], err
    assert out["threads"] == 2
    for thread in ("t1", "t2"):
        assert (
            cli(capsys, "history", thread, "--db", db)[1]
            == (cli(capsys, "history", thread, "--db", target)[1])
        )
    # the copy resumes on the target
    code, out, err = cli(capsys, "resume", "t1", "--db", target, "--answer", "yes")
    assert code == EXIT["ok"], err
    code, _, err = cli(capsys, "copy", db, target, "--thread", "t2")
    assert code == EXIT["refused"]  # already there: nothing is overwritten
    assert "t2" in err


def test_export_import_round_trip_and_a_bad_dump_changes_nothing(
    db: str, tmp_path: Path, capsys: Any
) -> None:
    start(capsys, db)
    dump = tmp_path / "dump.jsonl"
    code, _, err = cli(capsys, "export", "--db", db, "-o", str(dump))
    assert code == EXIT["ok"], err
    other = f"sqlite:///{tmp_path}/other.db"
    code, out, err = cli(capsys, "import", str(dump), "--db", other)
    assert code == EXIT["ok"], err
    assert out["checkpoints"] == len(cli(capsys, "history", "t1", "--db", db)[1])
    assert (
        cli(capsys, "history", "t1", "--db", other)[1]
        == cli(capsys, "history", "t1", "--db", db)[1]
    )

    broken = tmp_path / "broken.jsonl"
    lines = dump.read_text().splitlines()
    broken.write_text("\n".join(lines[:-2]) + "\n")  # the trailer and a record are missing
    third = f"sqlite:///{tmp_path}/third.db"
    code, _, err = cli(capsys, "import", str(broken), "--db", third)
    assert code not in (EXIT["ok"], EXIT["interrupted"])
    assert err.strip()
    assert not (tmp_path / "third.db").exists()  # checked before the target was opened
    assert cli(capsys, "threads", "--db", third)[0] == EXIT["not_found"]


def _keys(base: str, prefix: str) -> list[bytes]:
    from tests.redis_servers import client_for

    client = client_for(base)
    try:
        return sorted(client.scan_iter(match=f"{prefix}*", count=1000))
    finally:
        client.close()


def test_demo_runs_end_to_end_under_its_own_redis_prefix_and_cleans_up(tmp_path: Path) -> None:
    from tests.redis_servers import REDIS, client_for

    base = REDIS.standalone()  # no prefix: the demo picks its own
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("STATEKEEPER_DB", None)
    done = subprocess.run(
        [sys.executable, "-m", "statekeeper", "demo", "--redis", base],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    out = done.stdout
    found = re.search(r"under the key prefix '(statekeeper-demo-[0-9a-f]{8})'", out)
    assert found is not None, out + done.stderr
    prefix = found.group(1)
    left = _keys(base, prefix)
    if left:  # never leave the keys of a failed run behind either
        client = client_for(base)
        client.unlink(*left)
        client.close()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "killed pid" in out
    assert "ticket-1042  pending  tools" in out  # stopped before the tool step
    assert "status      interrupted" in out
    assert "status      done" in out
    assert out.count("copied 1 thread (") == 2  # file and Redis
    assert f"deleted the demo's keys under the prefix {prefix!r}" in out
    assert "Done: every step of the run survived the crash and the move." in out
    assert left == []  # the demo deleted every key it wrote


def test_the_demo_outside_a_checkout_says_so_and_touches_nothing(tmp_path: Path) -> None:
    """Run where its example agent cannot be imported (an installed statekeeper), the
    demo emptied its folder, printed the load error of its first run and went on."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "STATEKEEPER_DB")}
    env["PYTHONPATH"] = str(ROOT / "src")  # statekeeper importable, examples/ not
    done = subprocess.run(
        [sys.executable, "-m", "statekeeper", "demo", "--workdir", "demo"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert "not importable here: run it in the checkout's root (make demo)" in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_the_demo_keeps_a_prefix_the_url_names() -> None:
    from statekeeper.cli.demo import own_prefix

    assert own_prefix("redis://h:1/0?prefix=mine") == "redis://h:1/0?prefix=mine"
    chosen = own_prefix("redis://h:1/2?ttl=5")
    assert re.fullmatch(r"redis://h:1/2\?ttl=5&prefix=statekeeper-demo-[0-9a-f]{8}", chosen)
    assert own_prefix("redis://h:1/2") != own_prefix("redis://h:1/2")  # one per run


def test_forget_prefix_deletes_the_prefixs_own_keys_once_no_thread_is_left() -> None:
    from tests.redis_servers import REDIS
    from tests.test_cli import build_thread

    url = REDIS.url("standalone")
    prefix = url.rsplit("prefix=", 1)[1]
    try:
        build_thread(url, "t1")
        with open_checkpointer(f"{url}&mode=ro") as saver, pytest.raises(ReadOnlyError):
            saver.forget_prefix()
        with open_checkpointer(url) as saver:
            assert saver.forget_prefix() is False  # a thread is left: nothing deleted
            assert _keys(REDIS.standalone(), prefix) != []
            saver.delete_thread("t1")
            assert _keys(REDIS.standalone(), prefix) != []  # the layout and the registry
            assert saver.forget_prefix() is True
        assert _keys(REDIS.standalone(), prefix) == []
    finally:
        REDIS.cleanup(url)
