"""``benchmarks/ui_threads.py`` still runs (a tiny workload; the numbers are not looked at)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_threads_list_benchmark_runs(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "ui_threads.py"),
            "--threads",
            "30",
            "--samples",
            "1",
            "--json",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (result["threads"], result["checkpoints"]) == (30, 4)
    assert len(result["ms"]) == 6
    assert all(ms > 0 for ms in result["ms"].values())
