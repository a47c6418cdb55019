"""Chat workload benchmark: LangGraph's own checkpointers vs statekeeper's.

The workload is a chat graph (``StateGraph`` over ``messages: Annotated[list[AnyMessage],
add_messages]``) with one node, ``chatbot``, that appends a deterministic AI reply of about
150 tokens (~600 characters, built from a seeded word list so it does not compress
trivially; no LLM is called). Each turn is one sync ``graph.invoke`` with one ~100-token
(~400 characters) ``HumanMessage``. ``--threads`` conversations of ``--turns`` turns each
are played round-robin (turn 1 of every thread, then turn 2, ...), so every saver sees the
same inputs in the same order; the history of each thread grows with every turn.

Every saver is first warmed up on a throwaway instance (a few turns plus reads), then
measured on a fresh one, all in this one process and interleaved: turn ``n`` of every
thread runs on every saver (in a rotating order) before turn ``n + 1`` runs on any, and the
reads alternate the same way, so load from elsewhere on the machine hits all savers alike:

* first 10 / all / last 10: median ms of one invoke over the first 10 turns of every
  thread, over all its turns, over its last 10 turns;
* get_state: median ms of ~20 ``graph.get_state`` calls on the finished threads;
* list(10): median ms of ~20 ``saver.list(config, limit=10)`` calls, fully consumed;
* history: ms to consume ``graph.get_state_history`` of one whole thread, median over threads;
* bytes: what the saver stores -- for ``InMemorySaver`` the sum of its serialized values,
  for the SQLite savers the database file (plus any ``-wal``) after closing the saver and
  ``PRAGMA wal_checkpoint(TRUNCATE)``, for the file store its files, for Redis the
  ``MEMORY USAGE`` of its keys, for ``PostgresSaver`` its tables with indexes and TOAST.

Two rows give the networked savers a scale: LangGraph's ``PostgresSaver``, its own saver
over a network (needs the ``dev`` extra, which ``make bench`` installs, and PostgreSQL at
``$POSTGRES_URL``, default the local server), and the loopback floor, an ``InMemorySaver``
that makes one bare ``PING`` round trip to Redis per ``get_tuple``, ``put`` and
``put_writes``: what a turn's six round trips cost before any storage work. Ratios of
every other row to each LangGraph saver are printed under the table (< 1 means faster or
smaller). This is a benchmark, not a test: nothing is asserted about the numbers.

Run it with ``make bench`` or::

    .venv/bin/python benchmarks/chat_workload.py                  # 3 threads x 200 turns
    .venv/bin/python benchmarks/chat_workload.py --threads 2 --turns 50 --savers memory,ours
    .venv/bin/python benchmarks/chat_workload.py --savers memory,floor,redis,postgres
    .venv/bin/python benchmarks/chat_workload.py --json           # machine-readable results
"""

import argparse
import contextlib
import functools
import gc
import json
import os
import random
import socket
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any, TypedDict
from urllib.parse import urlsplit

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

WARMUP_TURNS = 5
READ_SAMPLES = 20
EDGE_TURNS = 10  # "first 10" and "last 10" columns


# -- deterministic chat text -------------------------------------------------------------

VOCABULARY = """
the a an to of and in on for with that this it is are was be can will would should could
we you they our your their my me us them agent graph state thread checkpoint message
memory tool call result user assistant model token prompt context window summary retry
error timeout database file table index query row column schema version migration lock
transaction commit rollback write read list history resume crash process server client
request response latency throughput cache hit miss batch queue worker task step node edge
branch loop condition input output value channel reducer config option default setting
deploy release build test lint type check coverage report metric trace log event alert
because however therefore although meanwhile instead otherwise perhaps usually rarely
quickly slowly carefully roughly exactly probably definitely simply really actually
first second third next last final early late small large fast slow new old good bad
simple complex stable flaky durable fragile safe risky clear vague short long empty full
customer invoice order payment refund shipment address account password email report
monday tuesday friday morning evening weekend quarter budget meeting deadline roadmap
python sqlite redis postgres json yaml http socket thread async await future promise
"""
WORDS = VOCABULARY.split()


def _sentence(rng: random.Random) -> str:
    words = rng.choices(WORDS, k=rng.randint(6, 16))
    if rng.random() < 0.3:
        words.insert(rng.randrange(len(words)), str(rng.randint(2, 9999)))
    text = " ".join(words)
    return text[0].upper() + text[1:] + rng.choice(".....?!")


def paragraph(rng: random.Random, chars: int) -> str:
    """Sentences of random words until about ``chars`` characters (~4 chars per token)."""
    sentences: list[str] = []
    while sum(len(s) + 1 for s in sentences) < chars:
        sentences.append(_sentence(rng))
    return " ".join(sentences)


def human_text(thread: int, turn: int) -> str:
    """The ~100-token user message of ``turn`` in ``thread``: same for every saver."""
    return paragraph(random.Random(f"human-{thread}-{turn}"), 400)


# -- the graph ---------------------------------------------------------------------------


class ChatState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def chatbot(state: ChatState) -> dict[str, Any]:
    """Reply with ~150 tokens derived only from the last message (deterministic, no LLM)."""
    rng = random.Random(f"ai-{state['messages'][-1].content}")
    return {"messages": [AIMessage(paragraph(rng, 600))]}


def build_graph(saver: BaseCheckpointSaver[Any]) -> Any:
    builder = StateGraph(ChatState)
    builder.add_node("chatbot", chatbot)
    builder.add_edge(START, "chatbot")
    builder.add_edge("chatbot", END)
    return builder.compile(checkpointer=saver)


def thread_config(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


# -- the savers --------------------------------------------------------------------------


@dataclass
class Store:
    """An open saver, and how to measure its size once it has been closed."""

    saver: BaseCheckpointSaver[Any]
    size: Callable[[], int | None]  # None: not a storage row


def sqlite_file_bytes(path: Path) -> int:
    """Size of a closed SQLite database: main file + leftover WAL after a truncating checkpoint."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    wal = path.with_name(path.name + "-wal")
    return path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)


def in_memory_bytes(saver: Any) -> int:
    """Sum of every serialized value an ``InMemorySaver`` holds (typed tuples are (type, bytes))."""
    total = 0
    for namespaces in saver.storage.values():
        for checkpoints in namespaces.values():
            for checkpoint, metadata, _parent in checkpoints.values():
                total += len(checkpoint[1]) + len(metadata[1])
    for writes in saver.writes.values():
        for _task_id, _channel, value, _task_path in writes.values():
            total += len(value[1])
    for _type, blob in saver.blobs.values():
        total += len(blob)
    return total


@contextmanager
def open_in_memory(_path: Path) -> Iterator[Store]:
    saver = InMemorySaver()
    yield Store(saver, lambda: in_memory_bytes(saver))


@contextmanager
def open_langgraph_sqlite(path: Path) -> Iterator[Store]:
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(path, check_same_thread=False)
    try:
        yield Store(SqliteSaver(conn), lambda: sqlite_file_bytes(path))
    finally:
        conn.close()


@contextmanager
def open_ours(path: Path) -> Iterator[Store]:
    from statekeeper.checkpointers import open_checkpointer

    with open_checkpointer(f"sqlite:///{path.resolve()}") as saver:
        yield Store(saver, lambda: sqlite_file_bytes(path))


@contextmanager
def open_ours_file(path: Path) -> Iterator[Store]:
    from statekeeper.checkpointers import open_checkpointer

    def directory_bytes() -> int:  # the sum of the store's file sizes
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())

    with open_checkpointer(f"file://{path.resolve()}") as saver:
        yield Store(saver, directory_bytes)


def redis_url() -> str:
    return os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")


@contextmanager
def open_ours_redis(_path: Path) -> Iterator[Store]:
    """On $REDIS_URL (default: the local server) under a fresh key prefix. Bytes: the sum
    of MEMORY USAGE of the prefix's keys when the saver closes; then the keys are deleted."""
    import redis

    from statekeeper.checkpointers import open_checkpointer

    url = redis_url()
    prefix = f"bench-{uuid.uuid4().hex}"
    client = redis.Redis.from_url(url)
    measured: list[int] = []
    try:
        with open_checkpointer(url, prefix=prefix) as saver:
            yield Store(saver, lambda: measured[0])
            keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
            measured.append(sum(client.memory_usage(k, samples=0) or 0 for k in keys))
    finally:
        for key in client.scan_iter(match=f"{prefix}*", count=1000):
            client.unlink(key)
        client.close()


@contextmanager
def open_langgraph_postgres(_path: Path) -> Iterator[Store]:
    """LangGraph's ``PostgresSaver`` on $POSTGRES_URL (default: the local server's
    ``postgres`` database), connected as LangGraph documents it, in a schema of its own
    that is dropped afterwards. Bytes: ``pg_total_relation_size`` of its tables (indexes
    and TOAST included) when the saver closes."""
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg import Connection, sql
    from psycopg.rows import dict_row

    url = os.environ.get("POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    schema = f"bench_{uuid.uuid4().hex}"
    measured: list[int] = []
    with Connection.connect(url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        try:
            with Connection.connect(
                url,
                autocommit=True,
                prepare_threshold=0,
                row_factory=dict_row,
                options=f"-c search_path={schema}",
            ) as conn:
                saver = PostgresSaver(conn)
                saver.setup()
                yield Store(saver, lambda: measured[0])
                row = conn.execute(
                    "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) AS size"
                    " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                    " WHERE n.nspname = %s AND c.relkind = 'r'",
                    (schema,),
                ).fetchone()
                measured.append(int(row["size"]) if row else 0)
        finally:
            admin.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


class RoundTripFloor(InMemorySaver):
    """``InMemorySaver`` plus one bare ``PING`` round trip to Redis, over a raw socket, per
    ``get_tuple``, ``put`` and ``put_writes``: the cost of a networked saver's round trips
    alone, before any storage work or client library. Sockets are borrowed from a free
    list, since LangGraph calls ``put`` from its background threads."""

    request = b"*1\r\n$4\r\nPING\r\n"  # what one round trip sends
    expected = b"+PONG"  # and the reply it waits for

    def __init__(self, url: str) -> None:
        super().__init__()
        parts = urlsplit(url)
        self._address = (parts.hostname or "127.0.0.1", parts.port or 6379)
        self._where = f"{self._address[0]}:{self._address[1]}"
        self._idle: list[socket.socket] = []
        self._lock = threading.Lock()

    def _round_trip(self) -> None:
        with self._lock:
            sock = self._idle.pop() if self._idle else None
        if sock is None:
            sock = socket.create_connection(self._address)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            sock.sendall(self.request)
            reply = sock.recv(64)
        except OSError:
            sock.close()
            raise
        if not reply.startswith(self.expected):  # an AUTH-protected server says -NOAUTH
            sock.close()
            raise RuntimeError(f"Redis at {self._where} answered {reply!r}")
        with self._lock:
            self._idle.append(sock)

    def close(self) -> None:
        with self._lock:
            for sock in self._idle:
                sock.close()
            self._idle.clear()

    def get_tuple(self, config: Any) -> Any:
        self._round_trip()
        return super().get_tuple(config)

    def put(self, *args: Any, **kwargs: Any) -> Any:
        self._round_trip()
        return super().put(*args, **kwargs)

    def put_writes(self, *args: Any, **kwargs: Any) -> None:
        self._round_trip()
        super().put_writes(*args, **kwargs)


@contextmanager
def open_round_trip_floor(_path: Path) -> Iterator[Store]:
    """See :class:`RoundTripFloor`. It stores what ``InMemorySaver`` does, so its bytes are
    left out."""
    saver = RoundTripFloor(redis_url())
    try:
        yield Store(saver, lambda: None)
    finally:
        saver.close()


@dataclass(frozen=True)
class Backend:
    key: str  # for --savers
    label: str  # for the table
    open: Callable[[Path], AbstractContextManager[Store]]
    langgraph: bool = False  # ratios are taken against LangGraph's savers


BACKENDS = [
    Backend("memory", "LangGraph InMemorySaver", open_in_memory, langgraph=True),
    Backend("sqlite", "LangGraph SqliteSaver", open_langgraph_sqlite, langgraph=True),
    Backend("postgres", "LangGraph PostgresSaver", open_langgraph_postgres, langgraph=True),
    Backend("floor", "loopback floor (InMemorySaver + 1 PING per call)", open_round_trip_floor),
    Backend("ours", "statekeeper SqliteCheckpointer", open_ours),
    Backend("file", "statekeeper FileCheckpointer", open_ours_file),
    Backend("redis", "statekeeper RedisCheckpointer", open_ours_redis),
]

# -- measuring ---------------------------------------------------------------------------

COLUMNS = {  # Result field -> table header
    "first_ms": "first 10 turns ms",
    "all_ms": "all turns ms",
    "last_ms": "last 10 turns ms",
    "get_state_ms": "get_state ms",
    "list_ms": "list(limit=10) ms",
    "history_ms": "full history ms",
    "bytes": "bytes stored",
}


@dataclass
class Result:
    saver: str
    first_ms: float | None = None
    all_ms: float | None = None
    last_ms: float | None = None
    get_state_ms: float | None = None
    list_ms: float | None = None
    history_ms: float | None = None
    bytes: int | None = None
    checkpoints_per_thread: int | None = None
    error: str | None = None
    turn_ms: list[list[float]] = field(default_factory=list, repr=False)
    samples: list[float] = field(default_factory=list, repr=False)


def timed_ms(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def progress(message: str) -> None:
    if sys.stderr.isatty():  # one line, rewritten in place
        print(f"\r{message:<70}", end="", file=sys.stderr, flush=True)
    else:
        print(message, file=sys.stderr, flush=True)


@dataclass
class Run:
    """One saver being measured: its open store, its graph and what was measured so far."""

    backend: Backend
    store: Store
    graph: Any
    result: Result


def play(graph: Any, thread_ids: list[str], turns: int) -> None:
    """Play ``turns`` untimed turns round-robin over the threads (a warm-up)."""
    for turn in range(turns):
        for t, thread_id in enumerate(thread_ids):
            graph.invoke(
                {"messages": [HumanMessage(human_text(t, turn))]}, thread_config(thread_id)
            )


def exercise_reads(graph: Any, saver: BaseCheckpointSaver[Any], thread_ids: list[str]) -> None:
    for thread_id in thread_ids:
        config = thread_config(thread_id)
        graph.get_state(config)
        list(saver.list(config, limit=10))
        list(graph.get_state_history(config))


def warm_up(backend: Backend, tmp: Path) -> None:
    """Run the code paths once on a throwaway instance so imports and caches are not timed."""
    with backend.open(tmp / f"warmup-{backend.key}.db") as store:
        graph = build_graph(store.saver)
        play(graph, ["warmup"], WARMUP_TURNS)
        exercise_reads(graph, store.saver, ["warmup"])


def rotated(runs: list[Run], shift: int) -> list[Run]:
    """``runs`` starting at a different one each time, so none always follows another."""
    shift %= len(runs)
    return runs[shift:] + runs[:shift]


def timed_each(runs: list[Run], samples: int, call: Callable[[Run, int], object]) -> None:
    """Time ``call(run, i)`` for every run, interleaved sample by sample, into
    ``run.result.samples``."""
    for i in range(samples):
        for run in rotated(runs, i):
            run.result.samples.append(timed_ms(functools.partial(call, run, i)))


def measure(backends: list[Backend], threads: int, turns: int, tmp: Path) -> list[Result]:
    """Measure every saver in one interleaved run: turn ``n`` of every thread is played on
    every saver before turn ``n + 1`` on any, and reads alternate the same way, so a burst
    of load on the machine slows every saver alike and the ratios stay meaningful."""
    results = [Result(backend.label) for backend in backends]
    thread_ids = [f"thread-{t}" for t in range(threads)]
    with contextlib.ExitStack() as stack:
        runs = []
        for backend, result in zip(backends, results, strict=True):
            try:
                warm_up(backend, tmp)
                store = stack.enter_context(backend.open(tmp / f"{backend.key}.db"))
            except Exception as exc:  # e.g. ours not importable, or no Redis
                traceback.print_exc(file=sys.stderr)
                result.error = f"{type(exc).__name__}: {exc}"
                continue
            runs.append(Run(backend, store, build_graph(store.saver), result))
            result.turn_ms = [[] for _ in thread_ids]
        gc.collect()
        for turn in range(turns):
            for run in rotated(runs, turn):
                for t, thread_id in enumerate(thread_ids):
                    turn_input = {"messages": [HumanMessage(human_text(t, turn))]}
                    config = thread_config(thread_id)
                    ms = timed_ms(lambda: run.graph.invoke(turn_input, config))  # noqa: B023
                    run.result.turn_ms[t].append(ms)
            if (turn + 1) % 10 == 0 or turn + 1 == turns:
                progress(f"turn {turn + 1}/{turns} x {threads} threads x {len(runs)} savers")
        edge = min(EDGE_TURNS, turns)
        for run in runs:
            rows = run.result.turn_ms
            run.result.first_ms = statistics.median(ms for row in rows for ms in row[:edge])
            run.result.all_ms = statistics.median(ms for row in rows for ms in row)
            run.result.last_ms = statistics.median(ms for row in rows for ms in row[-edge:])
        configs = [thread_config(thread_ids[i % threads]) for i in range(READ_SAMPLES)]
        reads: list[tuple[str, int, Callable[[Run, int], object]]] = [
            ("get_state_ms", READ_SAMPLES, lambda run, i: run.graph.get_state(configs[i])),
            (
                "list_ms",
                READ_SAMPLES,
                lambda run, i: list(run.store.saver.list(configs[i], limit=10)),
            ),
            (
                "history_ms",
                threads,
                lambda run, i: list(run.graph.get_state_history(thread_config(thread_ids[i]))),
            ),
        ]
        for column, samples, call in reads:
            timed_each(runs, samples, call)
            for run in runs:
                setattr(run.result, column, statistics.median(run.result.samples))
                run.result.samples.clear()
        for run in runs:
            run.result.checkpoints_per_thread = len(list(run.store.saver.list(configs[0])))
    for run in runs:
        run.result.bytes = run.store.size()  # after the saver is closed
    return results


# -- reporting ---------------------------------------------------------------------------


def ratios(ours: Result, theirs: Result) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for column in COLUMNS:
        a, b = getattr(ours, column), getattr(theirs, column)
        out[column] = a / b if a is not None and b else None
    return out


def ratio_rows(results: list[tuple[Backend, Result]]) -> dict[str, dict[str, float | None]]:
    """One row per (other saver, LangGraph saver) pair that both ran."""
    ok = [(b, r) for b, r in results if r.error is None]
    return {
        f"{mine.saver} / {theirs.saver}": ratios(mine, theirs)
        for b_mine, mine in ok
        if not b_mine.langgraph
        for b_theirs, theirs in ok
        if b_theirs.langgraph
    }


def fmt(value: float | None, column: str) -> str:
    if value is None:
        return "-"
    if column == "bytes":
        return f"{value:,.0f}"
    return f"{value:.2f}" if value < 100 else f"{value:.0f}"


def markdown(results: list[tuple[Backend, Result]], threads: int, turns: int) -> str:
    per_thread = next((r.checkpoints_per_thread for _, r in results if r.error is None), "-")
    lines = [
        f"Chat workload: {threads} threads x {turns} turns (checkpoints per thread: {per_thread})",
        "",
        "| saver | " + " | ".join(COLUMNS.values()) + " |",
        "|---|" + "---:|" * len(COLUMNS),
    ]
    for _, r in results:
        if r.error:
            lines.append(f"| {r.saver} | error: {r.error} |" + " |" * (len(COLUMNS) - 1))
        else:
            cells = [fmt(getattr(r, c), c) for c in COLUMNS]
            lines.append(f"| {r.saver} | " + " | ".join(cells) + " |")
    rows = ratio_rows(results)
    if rows:
        lines += ["", "Ratios to LangGraph's savers (< 1: faster / smaller than LangGraph's):", ""]
        lines += ["| ratio | " + " | ".join(COLUMNS.values()) + " |"]
        lines += ["|---|" + "---:|" * len(COLUMNS)]
        for name, row in rows.items():
            cells = ["-" if v is None else f"{v:.2f}" for v in row.values()]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def as_json(results: list[tuple[Backend, Result]], threads: int, turns: int) -> str:
    rows = []
    for _, r in results:
        row = asdict(r)
        del row["turn_ms"]
        rows.append(row)
    payload = {"threads": threads, "turns": turns, "results": rows, "ratios": ratio_rows(results)}
    return json.dumps(payload, indent=2)


def main(argv: list[str] | None = None) -> int:
    keys = [b.key for b in BACKENDS]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=3, help="conversations (default 3)")
    parser.add_argument("--turns", type=int, default=200, help="turns per thread (default 200)")
    parser.add_argument(
        "--savers",
        default=",".join(keys),
        help=f"comma-separated rows to run, from {','.join(keys)} (default: all)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of markdown")
    args = parser.parse_args(argv)
    wanted = [k.strip() for k in args.savers.split(",") if k.strip()]
    if unknown := sorted(set(wanted) - set(keys)):
        parser.error(f"unknown saver(s) {', '.join(unknown)}; choose from {', '.join(keys)}")
    if args.threads < 1 or args.turns < 1:
        parser.error("--threads and --turns must be >= 1")

    backends = [b for b in BACKENDS if b.key in wanted]
    with tempfile.TemporaryDirectory(prefix="statekeeper-bench-") as tmp:
        measured = measure(backends, args.threads, args.turns, Path(tmp))
    results = list(zip(backends, measured, strict=True))
    if sys.stderr.isatty():
        print(file=sys.stderr)
    report = as_json if args.json else markdown
    print(report(results, args.threads, args.turns))
    return 0


if __name__ == "__main__":
    sys.exit(main())
