"""Every example in ``examples/`` runs, as a user would run it, and says what it should.

Each script runs in a fresh interpreter with a temporary directory as its working
directory (examples write their databases under ``.statekeeper/`` there). A new example is
picked up automatically; add the lines it must print to ``EXPECTED_LINES``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES_DIR = Path(__file__).resolve().parents[1] / "examples"
EXAMPLES = sorted(EXAMPLES_DIR.glob("*.py"))

# Lines (stripped) that must appear in an example's stdout, in this order.
EXPECTED_LINES: dict[str, list[str]] = {
    "approval_agent.py": [
        "The agent asks: Send this reply?",
        "A human said yes: (reply sent)",
    ],
    "resume_after_crash.py": [
        "1. A child process starts the run. It will crash after 'research'.",
        "child> plan: done",
        "child> research: done",
        "child> write: the process dies here (os._exit), before write is done",
        "The child exited with code 1: it crashed mid-run.",
        "Thread 'report-42' has 4 checkpoints, oldest first:",
        "step  2  next: write       state: topic, questions, notes",
        "Not finished: the next step is write.",
        "3. Resume: graph.invoke(None, config) continues from the last checkpoint;",
        "write: done",
        "review: done",
        "4. Finished.",
        "Thread 'report-42' has 6 checkpoints, oldest first:",
        "step  4  next: (finished)  state: topic, questions, notes, draft, approved",
        "Approved: True",
        "Resumed after the crash and finished.",
    ],
}


def run_example(script: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(script)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,  # a guard against a hang; the examples take a few seconds
        check=False,
    )


def assert_lines_in_order(stdout: str, expected: list[str]) -> None:
    lines = [line.strip() for line in stdout.splitlines()]
    position = 0
    for want in expected:
        assert want in lines[position:], f"missing (in order): {want!r}\n--- stdout:\n{stdout}"
        position = lines.index(want, position) + 1


def test_examples_exist() -> None:
    assert EXAMPLES, f"no examples found in {EXAMPLES_DIR}"
    assert "approval_agent.py" in [e.name for e in EXAMPLES]  # the agent `make demo` runs


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(script: Path, tmp_path: Path) -> None:
    result = run_example(script, tmp_path)
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert result.stdout.strip(), "an example should say what it is doing"
    assert "Traceback" not in result.stderr, result.stderr
    assert_lines_in_order(result.stdout, EXPECTED_LINES.get(script.name, []))


def test_resume_after_crash_starts_fresh_each_run(tmp_path: Path) -> None:
    """Twice in a row, the example tells the same story: the database is recreated."""
    script = EXAMPLES_DIR / "resume_after_crash.py"
    first = run_example(script, tmp_path)
    second = run_example(script, tmp_path)
    assert first.returncode == second.returncode == 0, second.stdout + second.stderr
    assert (tmp_path / ".statekeeper" / "report.db").is_file()
    assert second.stdout == first.stdout
    # Resuming did not re-run the steps finished before the crash.
    after_resume = second.stdout.split("3. Resume:")[1]
    assert "plan: done" not in after_resume
    assert "research: done" not in after_resume
