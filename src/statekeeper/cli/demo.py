"""``statekeeper demo``: a crash, a resume, an approval and a move, with the real CLI.

Every step runs the ``statekeeper`` command in a child process and prints it with its
output, so the transcript is also a tutorial:

1. ``run`` starts the example agent on the embedded SQLite default; while its tool step
   is running, the process is killed with SIGKILL (no cleanup, like a crash);
2. ``threads`` shows the thread stopped before the tool step, and ``resume`` continues it
   by thread id until the agent asks a human for approval (an ``interrupt()``);
3. ``resume --answer yes`` approves, and the run finishes;
4. ``copy`` moves the thread to the file backend (and to Redis when one answers), and
   ``history`` reads it back from there, step by step.

In Redis the demo works under a key prefix of its own, ``statekeeper-demo-<random>``
(printed; a URL that names a ``prefix`` keeps its own), and deletes what it wrote there
when it is done, even when a step fails: the demo's thread, and then the prefix's own
keys once no other thread is left under it.

Offline and deterministic: no network (except an optional local Redis), no API key.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

from statekeeper.cli._common import CommandError, Commands
from statekeeper.errors import StatekeeperError, StorageNotFoundError

__all__ = ["add_demo", "run_demo"]

THREAD = "ticket-1042"
DEFAULT_GRAPH = "examples.approval_agent:graph"  # examples/ of a checkout
QUESTION = {"messages": [{"role": "user", "content": "Where is my order 1042?"}]}
# the demo deletes its keys when it is done; they also expire after an hour, should it
# be killed before that
LOCAL_REDIS = "redis://127.0.0.1:6379/0?ttl=3600&retries=0&socket_timeout=0.5"
PREFIX = "statekeeper-demo"
_KILL_WAIT = 60.0  # seconds to wait for the run to reach its tool step


def add_demo(commands: Commands) -> None:
    sub = commands.add(
        "demo",
        cmd_demo,
        "crash, resume, approve and move an example agent run",
        examples=(
            "statekeeper demo                          # SQLite under .statekeeper/demo",
            "statekeeper demo --workdir /tmp/sk-demo --redis redis://127.0.0.1:6379/0",
        ),
    )
    sub.add_argument("--workdir", default=".statekeeper/demo", help="where the demo stores state")
    sub.add_argument("--graph", default=DEFAULT_GRAPH, help="the agent graph")
    sub.add_argument("--redis", metavar="URL", help="also copy to this Redis (default: try local)")


def cmd_demo(args: argparse.Namespace) -> int:
    """The walkthrough above, in ``--workdir`` (emptied first); exits 0 when every step
    did what it should. A graph that cannot be loaded stops it before anything is done."""
    from statekeeper.errors import GraphLoadError
    from statekeeper.graphs import load_graph

    try:
        load_graph(args.graph)  # as the demo's runs will, from the current directory
    except GraphLoadError as exc:
        if args.graph != DEFAULT_GRAPH or exc.reason != "module":
            raise
        raise CommandError(
            f"the demo's agent is {DEFAULT_GRAPH} (examples/approval_agent.py of a "
            "statekeeper checkout), not importable here: run it in the checkout's root "
            "(make demo), or name another graph with --graph"
        ) from None
    return run_demo(workdir=Path(args.workdir), graph_ref=args.graph, redis_url=args.redis)


def run_demo(*, workdir: Path, graph_ref: str, redis_url: str | None = None) -> int:
    """Run the demo, storing everything under ``workdir`` (emptied first); return the
    exit code (0 when every step did what it should)."""
    workdir = workdir.absolute()
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    db = f"sqlite:///{workdir}/state.db"
    env = {**os.environ, "STATEKEEPER_DB": db, "PYTHONPATH": _pythonpath()}

    _say(f"1. Start the agent on thread {THREAD!r}, and kill it while its tool runs")
    _kill_during_tool(db, graph_ref, env)

    _say("2. The thread stopped before the tool step; resume it by thread id")
    _cli(env, "threads")
    _cli(env, "resume", THREAD, expect=10)

    _say("3. A human approves the reply; the run finishes")
    _cli(env, "resume", THREAD, "--answer", "yes")

    _say("4. Move the thread to other backends, and read it back from there")
    targets = [f"file://{workdir}/files"]
    chosen = own_prefix(redis_url or LOCAL_REDIS)
    redis = chosen if redis_url is not None or _redis_answers(chosen) else None
    if redis is not None:
        _say(f"   Redis: under the key prefix {_prefix(redis)!r}, deleted at the end")
        targets.append(redis)
    else:
        _say("   (no Redis answered at 127.0.0.1:6379: skipping the Redis copy)")
    try:
        for target in targets:
            _clear(target)
            _cli(env, "copy", db, target, "--thread", THREAD)
        _cli(env, "history", THREAD, "--db", targets[-1])
    finally:
        if redis is not None:
            _clean_up(redis)
    _say("Done: every step of the run survived the crash and the move.")
    return 0


def own_prefix(url: str) -> str:
    """``url`` with a key prefix of the demo's own, ``statekeeper-demo-<random>``, unless
    it names a prefix already."""
    if _prefix(url) is not None:
        return url
    return f"{url}{'&' if '?' in url else '?'}prefix={PREFIX}-{uuid.uuid4().hex[:8]}"


def _prefix(url: str) -> str | None:
    return dict(parse_qsl(urlsplit(url).query)).get("prefix")


def _clean_up(url: str) -> None:
    """Delete the demo's thread at ``url``, then the prefix's own keys when no other
    thread is left under it (a prefix the demo chose holds nothing else)."""
    from statekeeper.checkpointers import RedisCheckpointer, open_checkpointer

    with open_checkpointer(url) as saver:
        saver.delete_thread(THREAD)
        gone = isinstance(saver, RedisCheckpointer) and saver.forget_prefix()
    left = "" if gone else " (other threads are left under it)"
    print(f"   deleted the demo's keys under the prefix {_prefix(url)!r}{left}", flush=True)


def _kill_during_tool(db: str, graph_ref: str, env: dict[str, str]) -> None:
    command = ["run", graph_ref, "--thread", THREAD, "--input", json.dumps(QUESTION)]
    _echo(command)
    slow = {**env, "APPROVAL_AGENT_TOOL_DELAY": "600"}
    child = subprocess.Popen([sys.executable, "-m", "statekeeper", *command], env=slow)  # noqa: S603
    try:
        deadline = time.monotonic() + _KILL_WAIT
        while "tools" not in _next_nodes(db):
            if child.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("demo: the run never reached its tool step")
            time.sleep(0.05)
        time.sleep(0.2)  # the tool is now sleeping inside the child
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    print(f"   killed pid {child.pid} with SIGKILL while the tool step was running")


def _next_nodes(db: str) -> tuple[str, ...]:
    from statekeeper.checkpointers import open_checkpointer
    from statekeeper.threads import pending_nodes

    with open_checkpointer(db) as saver:
        tup = saver.get_tuple({"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}})
    return pending_nodes(tup.checkpoint) if tup else ()


def _cli(env: dict[str, str], *args: str, expect: int = 0) -> None:
    _echo(list(args))
    # this interpreter running statekeeper itself, on arguments this module chose
    done = subprocess.run([sys.executable, "-m", "statekeeper", *args], env=env, check=False)  # noqa: S603
    if done.returncode != expect:
        raise SystemExit(f"demo: exit code {done.returncode}, expected {expect}")


def _clear(url: str) -> None:
    """Forget what an earlier demo copied to ``url``, so the copy can run again."""
    from statekeeper.checkpointers import open_checkpointer

    with open_checkpointer(url) as saver:
        saver.delete_thread(THREAD)


def _redis_answers(url: str) -> bool:
    """Whether a Redis answers at ``url``; asked read-only, so nothing is written."""
    from statekeeper.checkpointers import open_checkpointer

    try:
        with open_checkpointer(url, mode="ro"):
            pass
    except StorageNotFoundError:
        return True  # it answered: nothing is stored under the demo's prefix yet
    except (StatekeeperError, ImportError):
        return False
    return True


def _pythonpath() -> str:
    # the child processes import the graph from the current directory, as this one does
    return os.pathsep.join(filter(None, [str(Path.cwd()), os.environ.get("PYTHONPATH")]))


def _echo(args: list[str]) -> None:
    print(f"\n$ statekeeper {shlex.join(args)}", flush=True)


def _say(text: str) -> None:
    print(f"\n{text}", flush=True)
