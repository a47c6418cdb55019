"""Claims beyond taking one: ``claim_holder`` (who runs a thread, without taking its claim
or creating anything), ``claim_thread(wait=...)`` and ``aclaim_thread``, on every backend.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from statekeeper._storage.claims import LockFileClaims
from statekeeper.errors import ConfigurationError, ReadOnlyError, ThreadBusyError
from tests.checkpointers.test_task_writes_and_claims import (
    CLAIM_TTL,
    claim_in_other_thread,
    claimer,
    holder_process,
    rival,
)
from tests.conftest import Backend

__all__ = ["claimer"]  # a fixture these tests use

ROOT = Path(__file__).resolve().parents[2]


def files_under(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def test_claim_holder_names_the_holder_only_while_the_claim_is_held(
    backend: Backend, url: str, claimer: Any
) -> None:
    assert claimer.claim_holder("t") is None
    with rival(backend, url, claimer) as other:
        with claimer.claim_thread("t"):
            for looker in (claimer, other):
                holder = looker.claim_holder("t")
                assert holder is not None
                assert holder["pid"] == os.getpid()
                assert holder["thread_id"] == "t"
                assert {"host", "since"} <= holder.keys()
            assert other.claim_holder("u") is None
            # looking never gets in the way of the holder, nor makes a claim fail
            assert isinstance(claim_in_other_thread(other, "t"), ThreadBusyError)
        assert other.claim_holder("t") is None
        assert claim_in_other_thread(other, "t") is None


def test_claim_holder_creates_nothing(
    backend: Backend, url: str, claimer: Any, tmp_path: Path
) -> None:
    before = files_under(tmp_path)
    for thread_id in ("never-claimed", "x" * 5000, "../escape"):
        assert claimer.claim_holder(thread_id) is None
    assert files_under(tmp_path) == before


def test_a_killed_holder_is_no_holder(backend: Backend, url: str, claimer: Any) -> None:
    if not backend.persistent:
        pytest.skip("memory:// storage lives in one process: no other process can claim it")
    with holder_process(backend, url, "shared") as child:
        assert claimer.claim_holder("shared")["pid"] == child.pid
        child.kill()
        child.wait(30)
    deadline = time.monotonic() + CLAIM_TTL + 10  # Redis: the claim expires after its TTL
    while claimer.claim_holder("shared") is not None:
        assert time.monotonic() < deadline, "the dead holder's claim never went away"
        time.sleep(0.05)
    with claimer.claim_thread("shared"):
        pass


def test_a_claim_waits_for_a_busy_thread_for_at_most_wait_seconds(
    backend: Backend, url: str, claimer: Any
) -> None:
    with rival(backend, url, claimer) as other:
        with claimer.claim_thread("t"):
            started = time.monotonic()
            with (
                pytest.raises(ThreadBusyError, match=r"\(waited 0.2 s\)") as busy,
                other.claim_thread("t", wait=0.2),
            ):
                pass
            assert time.monotonic() - started >= 0.2
            assert busy.value.holder["pid"] == os.getpid()
            got: list[float] = []

            def waiter() -> None:
                with other.claim_thread("t", wait=30):
                    got.append(time.monotonic())

            worker = threading.Thread(target=waiter)
            worker.start()
            time.sleep(0.3)
            assert got == []  # still waiting
            released = time.monotonic()
        worker.join(30)
        assert len(got) == 1
        assert got[0] >= released
        with other.claim_thread("t", wait=0):  # free: no waiting at all
            pass


@pytest.mark.parametrize("wait", [-1, "1", True, float("nan")])
def test_a_wait_that_is_not_a_number_of_seconds_is_refused(claimer: Any, wait: Any) -> None:
    with pytest.raises(ConfigurationError, match="wait must be None"):
        claimer.claim_thread("t", wait=wait)
    with pytest.raises(ConfigurationError, match="wait must be None"):
        claimer.aclaim_thread("t", wait=wait)


def test_a_read_only_checkpointer_takes_no_claim(claimer: Any) -> None:
    claimer.read_only = True  # what a backend sets when opened with mode=ro
    try:
        with pytest.raises(ReadOnlyError, match="cannot claim_thread"):
            claimer.claim_thread("t")
        with pytest.raises(ReadOnlyError, match="cannot claim_thread"):
            claimer.aclaim_thread("t")
        assert claimer.claim_holder("t") is None  # looking is reading
    finally:
        claimer.read_only = False


async def test_aclaim_thread_waits_without_blocking_the_event_loop(
    backend: Backend, url: str, claimer: Any
) -> None:
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    ticker = asyncio.create_task(tick())
    with rival(backend, url, claimer) as other:
        async with claimer.aclaim_thread("t"):
            assert claimer.claim_holder("t")["pid"] == os.getpid()
            with pytest.raises(ThreadBusyError):
                async with other.aclaim_thread("t"):
                    pass
            waiting = asyncio.create_task(_hold_briefly(other, "t"))
            await asyncio.sleep(0.2)
            assert not waiting.done()
        await asyncio.wait_for(waiting, 30)
        # a waiter cancelled while it waits leaves nothing behind
        async with claimer.aclaim_thread("t"):
            cancelled = asyncio.create_task(_hold_briefly(other, "t"))
            await asyncio.sleep(0.05)
            cancelled.cancel()
            with pytest.raises(asyncio.CancelledError):
                await cancelled
        assert other.claim_holder("t") is None
        async with other.aclaim_thread("t", wait=0):
            pass
    ticker.cancel()
    assert ticks >= 15  # the loop kept running while the claims waited


async def _hold_briefly(saver: Any, thread_id: str) -> None:
    async with saver.aclaim_thread(thread_id, wait=30):
        await asyncio.sleep(0.01)


# -- a lock file on read-only storage -------------------------------------------------------

PEEK = """
import json, sys
from pathlib import Path
from statekeeper._storage.claims import LockFileClaims
claims = LockFileClaims(Path(sys.argv[1]))
print(json.dumps([claims.holder("held"), claims.holder("free"), claims.holder("stale")]))
"""


def read_only_mounts(path: Path) -> bool:
    """Whether this machine lets a process bind-mount ``path`` read-only for itself."""
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "-rm", "sh", "-c", 'mount --bind -o ro "$1" "$1"', "sh", str(path)],
        capture_output=True,
    )
    return probe.returncode == 0


def test_claim_holder_reads_lock_files_on_a_read_only_mount(tmp_path: Path) -> None:
    if not read_only_mounts(tmp_path):
        if os.environ.get("CI") == "true":
            pytest.fail("read-only bind mounts (unshare -rm) must work under CI")
        pytest.skip("read-only bind mounts need unshare -rm, which is not available here")
    claims = LockFileClaims(tmp_path / "claims")
    stale = claims.path("stale")
    with claims.claim("held"):
        stale.write_text('{"pid": 1}\n')  # a file a killed holder left behind, unlocked
        before = files_under(tmp_path)
        done = subprocess.run(
            [
                "unshare",
                "-rm",
                "sh",
                "-c",
                'mount --bind -o ro "$1" "$1" && exec "$2" -c "$3" "$1/claims"',
                "sh",
                str(tmp_path),
                sys.executable,
                PEEK,
            ],
            cwd=ROOT,
            env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        held, free, left = json.loads(done.stdout)
        assert held["pid"] == os.getpid()
        assert held["thread_id"] == "held"
        assert (free, left) == (None, None)
        assert files_under(tmp_path) == before
