"""What the ``statekeeper`` command imports before it starts: ``import statekeeper.cli``
and ``statekeeper --help`` load no LangChain model module, no LangSmith, no driver, no
web framework, no progress-bar or embedding library; ``statekeeper threads`` on SQLite
loads no driver, web framework, model module or memory layer either. Each case runs in a
fresh interpreter and reads its ``sys.modules`` at exit (how long it takes is measured
by benchmarks/startup.py, not here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import empty_checkpoint

from statekeeper.checkpointers import open_checkpointer
from tests.test_cli import build_thread

ROOT = Path(__file__).resolve().parent.parent

# what the command line must never load just to start
HEAVY = (
    "langchain_core.language_models",
    "langsmith",
    "redis",
    "psycopg",
    "starlette",
    "jinja2",
    "uvicorn",
    "wordllama",
    "rich",
    "tqdm",
)
# what a command reading a SQLite database must not load either. LangGraph's checkpoint
# API itself (and the part of langchain_core it imports, which touches the
# ``langchain_core.language_models`` package but none of its models) is the floor.
NEVER_FOR_SQLITE = (
    "langchain_core.language_models.base",
    "langchain_core.language_models.chat_models",
    "langchain_core.language_models.llms",
    "redis",
    "psycopg",
    "starlette",
    "jinja2",
    "uvicorn",
    "wordllama",
    "statekeeper.memory",
    "statekeeper.graphs",
    "statekeeper.ui",
)

# run the code, then print every module it loaded, as JSON on the last line of stdout
_REPORT = "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))\n"
_MAIN = (
    "import sys\n"
    "from statekeeper.cli import main\n"
    "try:\n"
    "    code = main(sys.argv[1:])\n"
    "except SystemExit as exc:\n"
    "    code = exc.code\n"
    "print(f'exit {code}')\n"
)


def _loaded(code: str, *argv: str) -> tuple[list[str], str]:
    """The modules a fresh interpreter has loaded after running ``code`` with ``argv``,
    and what ``code`` printed before them."""
    done = subprocess.run(
        [sys.executable, "-c", code + _REPORT, *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    *printed, last = done.stdout.splitlines()
    return json.loads(last), "\n".join(printed)


def _matching(modules: list[str], names: tuple[str, ...]) -> list[str]:
    return [m for m in modules if any(m == n or m.startswith(f"{n}.") for n in names)]


def test_importing_the_cli_loads_nothing_heavy() -> None:
    modules, _ = _loaded("import statekeeper.cli")
    assert "statekeeper.cli" in modules  # the report sees what the code imported
    assert _matching(modules, HEAVY) == []
    # not even LangGraph: the commands import what they run
    assert _matching(modules, ("langgraph", "langchain_core", "pydantic")) == []


def test_help_loads_nothing_heavy() -> None:
    modules, printed = _loaded(_MAIN, "--help")
    assert "usage: statekeeper" in printed
    assert printed.endswith("exit 0")
    assert _matching(modules, HEAVY) == []
    assert (
        _matching(modules, ("langgraph", "statekeeper.checkpointers", "statekeeper.threads")) == []
    )


def test_a_command_help_loads_nothing_heavy() -> None:
    modules, printed = _loaded(_MAIN, "threads", "--help")
    assert "usage: statekeeper threads" in printed
    assert _matching(modules, HEAVY) == []


def test_threads_on_sqlite_loads_no_driver_web_framework_or_model(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/state.db"
    with open_checkpointer(url) as saver:
        for index in range(3):
            config: Any = {"configurable": {"thread_id": f"t{index}", "checkpoint_ns": ""}}
            saver.put(config, empty_checkpoint(), {"source": "input", "step": -1}, {})
    modules, printed = _loaded(_MAIN, "threads", "--db", url)
    *rows, last = printed.splitlines()[1:]
    assert sorted(row.split()[0] for row in rows) == ["t0", "t1", "t2"]
    assert last == "exit 0"
    assert "statekeeper.backends.sqlite.checkpointer" in modules
    assert _matching(modules, NEVER_FOR_SQLITE) == []
    # threads that wait for nothing need neither LangGraph's runtime nor LangSmith
    assert _matching(modules, ("langsmith", "langgraph.pregel", "rich", "tqdm")) == []


def test_threads_waiting_at_an_interrupt_load_no_driver_or_model(tmp_path: Path) -> None:
    """A thread waiting at an ``interrupt()`` holds LangGraph's ``Interrupt``, whose
    module brings LangChain's runnables (and LangSmith): still no driver, no web
    framework, no model, and not LangGraph's runtime."""
    url = f"sqlite:///{tmp_path}/state.db"
    build_thread(url, "t1")
    modules, printed = _loaded(_MAIN, "threads", "--db", url)
    assert printed.splitlines()[1].split()[:2] == ["t1", "interrupted"]
    assert _matching(modules, NEVER_FOR_SQLITE) == []
    assert _matching(modules, ("langgraph.pregel",)) == []


def test_threads_reads_task_statuses_as_langgraph_does() -> None:
    """``statekeeper.threads`` reads a step's writes by LangGraph's rules without
    importing LangGraph's reader (it brings the runtime): both must agree, on the
    control channels and on every kind of write."""
    from langgraph.pregel._task_status import CONTROL_WRITES, read_task_statuses
    from langgraph.types import Interrupt

    from statekeeper import threads

    assert frozenset(CONTROL_WRITES) == threads._CONTROL
    null = "00000000-0000-0000-0000-000000000000"
    asked, again = Interrupt(value="ok?", id="i1"), Interrupt(value="sure?", id="i2")
    cases: list[list[tuple[str, str, Any]]] = [
        [],
        [("a", "log", ["x"])],
        [("a", "__interrupt__", [asked])],
        [("a", "__interrupt__", asked)],  # one interrupt, not in a list
        [("a", "__interrupt__", [asked, again]), ("a", "__resume__", ["yes"])],
        [("a", "__interrupt__", [asked]), ("a", "__no_writes__", None)],  # finished
        [("a", "__error__", ValueError("boom")), ("a", "__error__", KeyError("late"))],
        [("a", "__error__", ValueError("x")), ("a", "__error_source_node__", "a")],
        [(null, "__resume__", "yes"), (null, "branch:to:b", None)],  # input, no task
        [("a", "__interrupt__", [asked]), ("b", "log", ["y"]), ("b", "__interrupt__", [again])],
        [("a", "__return__", 42)],
    ]
    for writes in cases:
        theirs = read_task_statuses(writes)
        ours = threads._task_statuses(writes)
        assert set(ours) == set(theirs), writes
        for task_id, status in theirs.items():
            mine = ours[task_id]
            assert mine.finished == status.finished, writes
            assert mine.interrupts == status.interrupts, writes
            assert mine.pending_interrupts == status.pending_interrupts, writes
            assert mine.error is status.error, writes
