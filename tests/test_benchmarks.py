"""The benchmark scripts still run: a tiny workload through each, every row without error.

Nothing here looks at the numbers (no timed assertions); it only keeps the scripts from
rotting as the code under them changes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _run(script: str, *args: str, cwd: Path) -> str:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_chat_workload_runs_every_local_saver(tmp_path: Path) -> None:
    out = _run(
        "chat_workload.py",
        *("--threads", "1", "--turns", "3", "--savers", "memory,sqlite,ours,file", "--json"),
        cwd=tmp_path,
    )
    results = json.loads(out)["results"]
    assert [r["saver"] for r in results] == [
        "LangGraph InMemorySaver",
        "LangGraph SqliteSaver",
        "statekeeper SqliteCheckpointer",
        "statekeeper FileCheckpointer",
    ]
    assert all(r["error"] is None and r["bytes"] > 0 for r in results)
    assert all(r["checkpoints_per_thread"] == 9 for r in results)


def test_thread_growth_runs(tmp_path: Path) -> None:
    out = _run("thread_growth.py", "--sizes", "10", "--samples", "3", cwd=tmp_path)
    assert "file" in out
    assert "sqlite" in out
