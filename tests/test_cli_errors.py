"""What a user who gets something wrong meets: a bad ``run --input`` refused before
anything is stored, errors as one JSON object under ``--json``, one not-found wording,
paths named in ``OSError``s, a closed pipe that exits quietly, and ids escaped in tables."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from statekeeper._console import escape
from statekeeper.checkpointers import open_checkpointer
from statekeeper.cli import EXIT, main

ROOT = Path(__file__).resolve().parent.parent
AGENT = "examples.approval_agent:graph"
QUESTION = {"messages": [{"role": "user", "content": "Where is order 1042?"}]}
_QUESTION = json.dumps(QUESTION)


@pytest.fixture(autouse=True)
def _importable_examples(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT))


def _start(capsys: pytest.CaptureFixture[str], db: str, thread: str = "t") -> None:
    code, _, err = _cli(capsys, "run", AGENT, "--db", db, "--thread", thread, "--input", _QUESTION)
    assert code == EXIT["interrupted"], err


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    "data",
    ["[1, 2]", '"hi"', '{"nokey": 1}', '{"messages": [{"role": "user", "content": NaN}]}'],
    ids=["list", "string", "unknown-key", "nan"],
)
def test_a_bad_input_is_a_usage_error_and_creates_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, data: str
) -> None:
    db = tmp_path / "state.db"
    code, out, err = _cli(capsys, "run", AGENT, "--db", f"sqlite:///{db}", "--input", data)
    assert code == EXIT["usage"]
    assert "Traceback" not in err
    assert err.count("\n") <= 6, err
    assert out == ""
    assert list(tmp_path.iterdir()) == []  # no database, no claim file


def test_an_unknown_key_is_named(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/state.db"
    code, _, err = _cli(capsys, "run", AGENT, "--db", db, "--input", '{"nokey": 1}')
    assert code == EXIT["usage"]
    assert "nokey" in err


def test_input_from_a_file_and_from_stdin(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = f"sqlite:///{tmp_path}/state.db"
    source = tmp_path / "input.json"
    source.write_text(json.dumps(QUESTION))
    code, _, err = _cli(capsys, "run", AGENT, "--db", db, "--thread", "f", "--input", f"@{source}")
    assert code == EXIT["interrupted"], err
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(QUESTION)))
    code, _, err = _cli(capsys, "run", AGENT, "--db", db, "--thread", "s", "--input", "-")
    assert code == EXIT["interrupted"], err
    with open_checkpointer(db) as saver:
        threads = {t.config["configurable"]["thread_id"] for t in saver.list(None)}
    assert threads == {"f", "s"}


def test_json_errors_are_one_object_with_a_stable_code(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    db = f"sqlite:///{tmp_path}/state.db"
    _start(capsys, db)
    code, _, err = _cli(capsys, "--json", "history", "missing", "--db", db)
    assert code == EXIT["not_found"]
    error = json.loads(err)["error"]
    assert error["exit"] == EXIT["not_found"]
    assert error["code"] == "not_found"
    assert "missing" in error["message"]


def test_history_limit_zero_is_a_usage_error_not_a_missing_thread(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    db = f"sqlite:///{tmp_path}/state.db"
    _start(capsys, db)
    with pytest.raises(SystemExit) as stopped:  # argparse's own usage error
        main(["history", "t", "--limit", "0", "--db", db])
    assert stopped.value.code == EXIT["usage"]
    err = capsys.readouterr().err
    assert "at least 1" in err
    assert "no thread" not in err


def test_export_into_a_directory_names_the_path(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    db = f"sqlite:///{tmp_path}/state.db"
    _start(capsys, db)
    code, _, err = _cli(capsys, "export", "-o", str(tmp_path), "--db", db)
    assert code in (EXIT["usage"], EXIT["failed"])
    assert str(tmp_path) in err
    assert "Traceback" not in err


def test_output_into_a_closed_pipe_exits_quietly(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/state.db"
    with open_checkpointer(db) as saver:
        for index in range(300):
            config: Any = {"configurable": {"thread_id": f"t{index}", "checkpoint_ns": ""}}
            saver.put(config, empty_checkpoint(), {"source": "input", "step": -1}, {})
    command = f"{sys.executable} -m statekeeper threads --json --db {db} | head -c 10"
    done = subprocess.run(
        ["bash", "-o", "pipefail", "-c", command], capture_output=True, text=True, cwd=ROOT
    )
    assert done.stderr == "", done.stderr
    assert done.returncode in (0, EXIT.get("closed_pipe", 141))


def test_bidi_and_control_characters_are_escaped() -> None:
    assert escape("abc\u202edef") == "abc\\u202edef"
    assert escape("a\x1b[31mb") == "a\\x1b[31mb"
    assert escape("plain id") == "plain id"
