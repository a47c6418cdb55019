"""Startup benchmark: how long the ``statekeeper`` command takes, from exec to exit.

Each command runs ``--runs`` times (default 10) in a fresh process, the commands
interleaved in a rotating order so none always follows another; the table gives the
median wall time, its ratio to ``python -c pass`` (the interpreter's own start), and
the median CPU time (user + system) of the process, which a loaded machine inflates far
less than the wall time.
Rows:

* ``python -c pass``: the interpreter alone, what every ratio is taken against;
* ``import langgraph.checkpoint.base``: LangGraph's checkpoint API, which every command
  that opens a checkpointer imports (the floor of the inspection commands; the ratio
  table compares the commands with it);
* ``statekeeper --help``, and the inspection commands ``threads``, ``history``,
  ``show``, ``diff`` and ``verify`` against a SQLite database of ``--threads`` finished
  threads (``--interrupted``: threads waiting at an ``interrupt()``, whose
  ``Interrupt`` values bring LangGraph's runtime and LangSmith along).

This is a benchmark, not a test: nothing is asserted about the numbers.

    .venv/bin/python benchmarks/startup.py                   # 10 runs of every command
    .venv/bin/python benchmarks/startup.py --interrupted --json
    .venv/bin/python benchmarks/startup.py --runs 3 --commands help,threads
"""

import argparse
import operator
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

from _report import Progress, Row, as_json, ratio_table, rotated, table

THREAD = "t0"
# the command lines measured, by key; {db} is the SQLite URL
COMMANDS: dict[str, list[str]] = {
    "help": ["--help"],
    "threads": ["threads", "--db", "{db}"],
    "history": ["history", THREAD, "--db", "{db}"],
    "show": ["show", THREAD, "--db", "{db}"],
    "diff": ["diff", THREAD, "--db", "{db}"],
    "verify": ["verify", "--db", "{db}"],
}
COLUMNS = {
    "seconds": "median s",
    "vs_python": "x python -c pass",
    "cpu_seconds": "median CPU s",
}


class Steps(TypedDict, total=False):
    log: Annotated[list[str], operator.add]
    ok: Any


def _step(name: str) -> Any:
    return lambda state: {"log": [name]}


def _approve(state: Steps) -> dict[str, Any]:
    from langgraph.types import interrupt

    return {"ok": interrupt("ok?")}


def build_database(url: str, threads: int, interrupted: bool) -> None:
    """``threads`` threads of a three-step graph, finished or waiting at an interrupt."""
    from langgraph.graph import END, START, StateGraph

    from statekeeper.checkpointers import open_checkpointer

    builder = StateGraph(Steps)
    builder.add_node("a", _step("a"))
    builder.add_node("b", _step("b"))
    builder.add_node("c", _approve if interrupted else _step("c"))
    builder.add_edge(START, "a")
    builder.add_edge("a", "b")
    builder.add_edge("b", "c")
    builder.add_edge("c", END)
    with open_checkpointer(url) as saver:
        graph = builder.compile(checkpointer=saver)
        for index in range(threads):
            graph.invoke({"log": []}, {"configurable": {"thread_id": f"t{index}"}})


def _statekeeper() -> list[str]:
    """The installed ``statekeeper`` script beside this interpreter, as a user runs it;
    ``python -m statekeeper`` where there is none."""
    script = Path(sys.executable).with_name("statekeeper")
    return [str(script)] if script.exists() else [sys.executable, "-m", "statekeeper"]


def command_lines(keys: list[str], db: str) -> dict[str, tuple[str, list[str]]]:
    """Label and argv of every row: the two baselines, then the chosen commands."""
    lines = {
        "python": ("python -c pass", [sys.executable, "-c", "pass"]),
        "langgraph": (
            "import langgraph.checkpoint.base",
            [sys.executable, "-c", "import langgraph.checkpoint.base"],
        ),
    }
    for key in keys:
        words = [word.format(db=db) for word in COMMANDS[key]]
        shown = " ".join(w for w in COMMANDS[key] if w not in ("--db", "{db}"))
        lines[key] = (f"statekeeper {shown}", [*_statekeeper(), *words])
    return lines


def _cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def _once(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU (user + system) seconds of one run of ``argv``. On a loaded machine
    the wall time grows with the load; the CPU time stays near a quiet machine's."""
    cpu, start = _cpu(), time.perf_counter()
    done = subprocess.run(argv, capture_output=True, env=env, check=False)
    seconds, cpu = time.perf_counter() - start, _cpu() - cpu
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip().splitlines()
        raise RuntimeError(said[-1] if said else f"exit status {done.returncode}")
    return seconds, cpu


def measure(keys: list[str], runs: int, threads: int, interrupted: bool) -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="statekeeper-startup-") as tmp:
        db = f"sqlite:///{tmp}/state.db"
        build_database(db, threads, interrupted)
        lines = command_lines(keys, db)
        env = {**os.environ, "STATEKEEPER_DB": db}
        rows: dict[str, Row] = {
            key: {"saver": label, "langgraph": key == "langgraph", "error": None}
            for key, (label, _) in lines.items()
        }
        samples: dict[str, list[tuple[float, float]]] = {key: [] for key in lines}
        progress = Progress(runs * len(lines), "processes")
        for i in range(runs):
            for key in rotated(list(lines), i):
                if rows[key]["error"] is None:
                    try:
                        samples[key].append(_once(lines[key][1], env))
                    except RuntimeError as exc:
                        rows[key]["error"] = str(exc)
                progress.advance(note=key)
        progress.close()
    baseline = statistics.median(wall for wall, _ in samples["python"])
    for key, row in rows.items():
        if row["error"] is None:
            row["seconds"] = statistics.median(wall for wall, _ in samples[key])
            row["cpu_seconds"] = statistics.median(cpu for _, cpu in samples[key])
            row["vs_python"] = row["seconds"] / baseline if baseline else None
            row["runs"] = len(samples[key])
    return list(rows.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="runs of each command (default 10)")
    parser.add_argument(
        "--commands",
        default=",".join(COMMANDS),
        help=f"comma-separated commands to run, from {','.join(COMMANDS)} (default: all)",
    )
    parser.add_argument("--threads", type=int, default=20, help="threads stored (default 20)")
    parser.add_argument("--interrupted", action="store_true", help="threads wait at an interrupt()")
    parser.add_argument("--json", action="store_true", help="print JSON instead of markdown")
    args = parser.parse_args(argv)
    keys = [k.strip() for k in args.commands.split(",") if k.strip()]
    if unknown := sorted(set(keys) - set(COMMANDS)):
        parser.error(f"unknown command(s) {', '.join(unknown)}; choose from {', '.join(COMMANDS)}")
    if args.runs < 1 or args.threads < 1:
        parser.error("--runs and --threads must be >= 1")

    rows = measure(keys, args.runs, args.threads, args.interrupted)
    kind = "threads waiting at an interrupt()" if args.interrupted else "finished threads"
    params = {"runs": args.runs, "threads": args.threads, "interrupted": args.interrupted}
    if args.json:
        print(as_json(params, rows, ["seconds", "cpu_seconds"]))
    else:
        print(f"Startup, median of {args.runs} runs; SQLite database of {args.threads} {kind}\n")
        print("\n".join(table(rows, COLUMNS, first="command")))
        caption = "Ratios to LangGraph's checkpoint API alone (its import is the floor):"
        commands = [row for row in rows if row["saver"] != "python -c pass"]
        ratio_columns = {"seconds": "median s", "cpu_seconds": "median CPU s"}
        print("\n".join(ratio_table(commands, ratio_columns, caption)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
