"""``statekeeper ui``: the command that serves the inspector."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from statekeeper.checkpointers import open_checkpointer
from statekeeper.graphs import Runner
from statekeeper.ui.server import bind
from tests.ui.conftest import QUESTION, REF

ROOT = Path(__file__).resolve().parents[2]

BLOCK_EXTRA = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("starlette", "jinja2", "uvicorn"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Block())
from statekeeper.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}


def test_without_the_extra_it_says_what_to_install(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", BLOCK_EXTRA, "--db", "memory://", "ui", "--no-browser"],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=tmp_path,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr == "statekeeper ui: needs pip install 'statekeeper[ui]'\n"
    assert done.stdout == ""


def test_a_taken_port_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from statekeeper.cli import main

    with bind("127.0.0.1", 0) as taken:
        taken.listen()
        port = taken.getsockname()[1]
        code = main(["--db", "memory://", "ui", "--port", str(port), "--no-browser"])
    assert code == 2
    assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err


def test_a_graph_that_does_not_load_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    from statekeeper.cli import main

    code = main(["--db", "memory://", "ui", "--graph", "no_such_module:graph", "--no-browser"])
    assert code == 2
    assert "cannot load graph 'no_such_module:graph'" in capsys.readouterr().err


def test_without_write_the_storage_is_opened_read_only_and_never_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from statekeeper.cli import EXIT, main

    missing = tmp_path / "nothing" / "state.db"
    code = main(["--db", f"sqlite:///{missing}", "ui", "--port", "0", "--no-browser"])
    assert code == EXIT["not_found"]
    assert "no database at" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # no database, no folder, no lock file


@pytest.mark.slow
def test_it_serves_the_storage_at_the_printed_url_until_interrupted(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'state.db'}"
    with open_checkpointer(url) as saver:
        Runner(saver).run(REF, QUESTION, thread_id="waiting")
    server = subprocess.Popen(
        [sys.executable, "-m", "statekeeper", "--db", url, "ui", "--port", "0", "--no-browser"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
        cwd=ROOT,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert line.startswith("statekeeper ui: http://127.0.0.1:")
        start = line.split(": ", 1)[1].strip()
        with httpx.Client(follow_redirects=True, timeout=10) as browser:
            page = browser.get(start)
            assert page.status_code == 200
            assert 'href="/thread?thread=waiting"' in page.text
            assert "(read-only)" in page.text
            assert browser.get(start).status_code == 403  # the token was spent
            assert browser.get(start.split("?")[0] + "interrupts").status_code == 200
            origin = start.split("/?")[0]
            post = browser.post(
                f"{origin}/actions/resume",
                data={"thread": "waiting", "answer": "yes"},
                headers={"origin": origin},
            )
            assert post.status_code == 404  # no --write: no write route
    finally:
        server.send_signal(signal.SIGINT)
        _, err = server.communicate(timeout=30)
    assert server.returncode == 0, err
