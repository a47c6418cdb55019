"""How fast notes are written to a memory store, with and without embeddings, and what
the vectors add to each note.

Writes the same notes (the user's messages of ``benchmarks/memory/dev.json``, each as
a :class:`~statekeeper.memory.notes.Note` with its provenance, one ``store.put`` per
note, as :class:`~statekeeper.memory.node.SummarizationNode` writes them) to every row:
LangGraph's ``InMemoryStore`` (the reference, without an index and with one using the
same static model) and statekeeper's stores on SQLite (a file), files, Redis and
``memory://``, each without embeddings and with ``embed=static`` (the vectors computed
at write time, as the store does). Rows are interleaved round by round in a rotating
order, so machine load hits them alike; the table gives the median notes/s over the
rounds and its ratio to ``InMemoryStore`` of the same group (without or with
embeddings). ``bytes/note`` is what the store holds per note after a round (the SQLite
file with its WAL, the files, Redis's ``MEMORY USAGE`` of the row's keys; ``-`` in
memory), and ``vector bytes/note`` its difference between a backend's two rows.

Redis is ``$REDIS_URL`` (default the local server); each Redis row writes under a fresh
key prefix that it deletes afterwards. Nothing is asserted: it is a benchmark.

``--node`` measures the whole write path instead: every conversation of ``dev.json``
played turn by turn through a :class:`~statekeeper.memory.node.SummarizationNode` (budget
1024, the extractive summarizer: statements, dates, fact keys, session notes, conflicts)
into ``memory://`` and a SQLite file, timing the node calls only; it reports messages
compacted and notes written per second.

    .venv/bin/python benchmarks/memory_writes.py                   # 400 notes x 3 rounds
    .venv/bin/python benchmarks/memory_writes.py --notes 50 --rounds 1 --json
    .venv/bin/python benchmarks/memory_writes.py --node            # 3 rounds
"""

import argparse
import datetime
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _report import Progress, add_row_options, as_json, chosen_rows, ratio_table, rotated, table
from _savers import POSTGRES_BYTES, directory_bytes, postgres_url, redis_url

DATASET = Path(__file__).resolve().parent / "memory" / "dev.json"
NAMESPACE = ("notes", "bench")

COLUMNS = {"notes_per_s": "notes/s", "bytes_per_note": "bytes/note"}


@dataclass(frozen=True)
class Row:
    key: str
    label: str
    group: str  # "plain" or "embed": ratios are taken within a group
    langgraph: bool
    open: Callable[[Path], Any]  # a context manager yielding (store, bytes function)


def _notes(count: int) -> list[Any]:
    from statekeeper.memory.notes import Note, Provenance

    data = json.loads(DATASET.read_text(encoding="utf-8"))
    notes = []
    for conversation in data["conversations"]:
        for session in conversation["sessions"]:
            said = datetime.datetime.fromisoformat(session["time"]).replace(tzinfo=datetime.UTC)
            for message in session["messages"]:
                if message["role"] != "user":
                    continue
                provenance = Provenance(
                    thread_id=conversation["id"],
                    message_ids=(message["id"],),
                    said_from=said,
                    said_to=said,
                    created_at=said,
                    summarizer="bench/1",
                )
                text = f"{message['speaker']}: {message['text']}"
                notes.append(Note(text=text, provenance=provenance))
                if len(notes) == count:
                    return notes
    return notes


@contextmanager
def _langgraph(_path: Path, embed: bool) -> Iterator[tuple[Any, Callable[[], int | None]]]:
    from langgraph.store.memory import InMemoryStore

    from statekeeper.memory.embeddings import STATIC_DIMS, StaticEmbeddings

    index: Any = {"dims": STATIC_DIMS, "embed": StaticEmbeddings()} if embed else None
    yield InMemoryStore(index=index), lambda: None


@contextmanager
def _ours(path: Path, backend: str, embed: bool) -> Iterator[tuple[Any, Callable[[], int | None]]]:
    from statekeeper.memory.store import open_store

    query = "?embed=static" if embed else ""
    if backend == "sqlite":
        url, size = f"sqlite:///{path}/store.db{query}", lambda: directory_bytes(path)
    elif backend == "file":
        url, size = f"file://{path}/files{query}", lambda: directory_bytes(path)
    elif backend == "memory":
        url, size = f"memory://{query}", lambda: None
    else:
        opener = _redis_store if backend == "redis" else _postgres_store
        with opener(query) as (store, measure):
            yield store, measure
        return
    with open_store(url) as store:
        yield store, size


@contextmanager
def _redis_store(query: str) -> Iterator[tuple[Any, Callable[[], int | None]]]:
    import redis

    from statekeeper.memory.store import open_store

    prefix = f"bench-{uuid.uuid4().hex}"
    base = redis_url()
    url = f"{base}{'&' if '?' in base else '?'}prefix={prefix}"
    if query:
        url += "&" + query.lstrip("?")
    client = redis.Redis.from_url(base)

    def measure() -> int:
        keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
        return sum(client.memory_usage(k, samples=0) or 0 for k in keys)

    try:
        with open_store(url) as store:
            yield store, measure
    finally:
        for key in client.scan_iter(match=f"{prefix}*", count=1000):
            client.unlink(key)
        client.close()


@contextmanager
def _postgres_store(query: str) -> Iterator[tuple[Any, Callable[[], int | None]]]:
    """A store in a schema of its own on $POSTGRES_URL, dropped afterwards; bytes: its
    tables with their indexes and TOAST."""
    from psycopg import Connection, sql

    from statekeeper.memory.store import open_store

    base = postgres_url()
    schema = f"bench_{uuid.uuid4().hex}"
    url = f"{base}{'&' if '?' in base else '?'}schema={schema}"
    if query:
        url += "&" + query.lstrip("?")
    admin = Connection.connect(base, autocommit=True)

    def measure() -> int:
        row = admin.execute(POSTGRES_BYTES.replace("current_schema()", "%s"), (schema,)).fetchone()
        return int(row[0]) if row else 0

    try:
        with open_store(url) as store:
            yield store, measure
    finally:
        admin.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
        admin.close()


def _rows() -> list[Row]:
    rows = []
    for group, embed in (("plain", False), ("embed", True)):
        suffix = ", embed=static" if embed else ""
        rows.append(
            Row(
                f"langgraph-{group}",
                f"LangGraph InMemoryStore{suffix}",
                group,
                True,
                lambda path, e=embed: _langgraph(path, e),
            )
        )
        for backend in ("sqlite", "file", "redis", "postgres", "memory"):
            rows.append(
                Row(
                    f"{backend}-{group}",
                    f"statekeeper {backend}{suffix}",
                    group,
                    False,
                    lambda path, b=backend, e=embed: _ours(path, b, e),
                )
            )
    return rows


KEYS = [row.key for row in _rows()]


def _write(row: Row, notes: list[Any]) -> tuple[float, int | None]:
    """One round: every note put once into a fresh store; (notes/s, bytes held)."""
    with tempfile.TemporaryDirectory() as tmp, row.open(Path(tmp)) as (store, size):
        start = time.perf_counter()
        for note in notes:
            store.put(NAMESPACE, note.key, note.to_value())
        elapsed = time.perf_counter() - start
        return len(notes) / elapsed, size()


def _play_node(url: str) -> tuple[float, int, int]:
    """Every conversation of dev.json through a SummarizationNode into ``url``, a turn
    (a user's message and the replies) per call, then archived (a one-token budget):
    (seconds in the node, messages compacted, notes written)."""
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.graph.message import add_messages

    from statekeeper.memory.node import NoteOptions, SummarizationNode
    from statekeeper.memory.store import open_store

    data = json.loads(DATASET.read_text(encoding="utf-8"))
    elapsed, compacted, written = 0.0, 0, 0
    with open_store(url) as store:
        for conversation in data["conversations"]:
            config: Any = {"configurable": {"thread_id": conversation["id"]}}
            clock = [datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)]
            notes = NoteOptions(clock=lambda c=clock: c[0])  # type: ignore[misc]
            node = SummarizationNode(budget_tokens=1024, store=store, notes=notes)
            archive = SummarizationNode(budget_tokens=1, keep_tokens=0, store=store, notes=notes)
            state: dict[str, Any] = {"messages": []}
            turns: list[list[Any]] = []
            for session in conversation["sessions"]:
                when = {"timestamp": session["time"]}
                for message in session["messages"]:
                    kind = HumanMessage if message["role"] == "user" else AIMessage
                    said = kind(message["text"], id=message["id"], name=message["speaker"],
                                additional_kwargs=when)  # fmt: skip
                    if not turns or (message["role"] == "user" and turns[-1][-1].type == "ai"):
                        turns.append([])
                    turns[-1].append(said)
            for turn, step in [*((t, node) for t in turns), ([], archive)]:
                state["messages"] = add_messages(state["messages"], turn)
                if turn:
                    clock[0] = datetime.datetime.fromisoformat(
                        turn[0].additional_kwargs["timestamp"]
                    ).replace(tzinfo=datetime.UTC)
                start = time.perf_counter()
                update = step(state, config)
                elapsed += time.perf_counter() - start
                if update:
                    before = len(state["messages"])
                    state["messages"] = add_messages(state["messages"], update["messages"])
                    state["summary"] = update["summary"]
                    compacted += before - len(state["messages"])
            written += len(store.search(("notes", conversation["id"]), limit=100_000))
    return elapsed, compacted, written


def _node_main(args: argparse.Namespace) -> int:
    rows = {"memory": "memory://", "sqlite": "sqlite:///{dir}/notes.db"}
    results: dict[str, list[tuple[float, int, int]]] = {key: [] for key in rows}
    progress = Progress(args.rounds * len(rows), "rows")
    for round_ in range(args.rounds):
        for key in rotated(list(rows), round_):
            with tempfile.TemporaryDirectory() as tmp:
                results[key].append(_play_node(rows[key].format(dir=tmp)))
            progress.advance(note=key)
    progress.close()
    table_rows = []
    for key, runs in results.items():
        seconds = statistics.median(run[0] for run in runs)
        messages, notes = runs[0][1], runs[0][2]
        table_rows.append(
            {
                "saver": f"SummarizationNode -> {rows[key].split(':')[0]}",
                "key": key,
                "langgraph": False,
                "error": None,
                "messages_per_s": messages / seconds,
                "notes_per_s": notes / seconds,
                "notes": notes,
            }
        )
    columns = {"messages_per_s": "messages/s", "notes_per_s": "notes/s", "notes": "notes"}
    if args.json:
        print(as_json({"rounds": args.rounds}, table_rows, columns))
    else:
        print(f"dev.json through SummarizationNode x {args.rounds} rounds (median)\n")
        print("\n".join(table(table_rows, columns)))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--notes", type=int, default=400, help="notes per round (default 400)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument(
        "--node", action="store_true", help="the whole write path: dev.json through the node"
    )
    add_row_options(parser, KEYS)
    args = parser.parse_args(argv)
    if args.node:
        return _node_main(args)
    wanted = chosen_rows(parser, args, KEYS)
    rows = [row for row in _rows() if row.key in wanted]
    notes = _notes(args.notes)

    from statekeeper.memory.embeddings import StaticEmbeddings

    StaticEmbeddings().embed_query("warm up")  # the model loads once, outside the timings

    speeds: dict[str, list[float]] = {row.key: [] for row in rows}
    sizes: dict[str, int | None] = {}
    errors: dict[str, str] = {}
    progress = Progress(args.rounds * len(rows), "rows")
    for round_ in range(args.rounds):
        for row in rotated(rows, round_):
            if row.key not in errors:
                try:
                    speed, held = _write(row, notes)
                    speeds[row.key].append(speed)
                    sizes[row.key] = held
                except Exception as exc:  # a row that cannot run says why
                    errors[row.key] = f"{type(exc).__name__}: {exc}"
            progress.advance(note=row.key)
    progress.close()

    results = []
    for row in rows:
        held = sizes.get(row.key)
        results.append(
            {
                "saver": row.label,
                "key": row.key,
                "group": row.group,
                "langgraph": row.langgraph,
                "error": errors.get(row.key),
                "notes_per_s": statistics.median(speeds[row.key]) if speeds[row.key] else None,
                "bytes_per_note": held / len(notes) if held is not None else None,
            }
        )
    by_key = {r["key"]: r for r in results}
    for r in results:
        plain = by_key.get(r["key"].replace("-embed", "-plain"))
        r["vector_bytes_per_note"] = (
            r["bytes_per_note"] - plain["bytes_per_note"]
            if r["group"] == "embed"
            and plain is not None
            and r["bytes_per_note"] is not None
            and plain["bytes_per_note"] is not None
            else None
        )
    columns = {**COLUMNS, "vector_bytes_per_note": "vector bytes/note"}
    if args.json:
        payload = {"notes": len(notes), "rounds": args.rounds}
        print(as_json(payload, results, COLUMNS))
    else:
        print(f"{len(notes)} notes x {args.rounds} rounds (median notes/s)\n")
        print("\n".join(table(results, columns)))
        print("\n".join(ratio_table(results, {"notes_per_s": "notes/s"}, caption=_CAPTION)))
    return 0


_CAPTION = "Ratios to LangGraph's InMemoryStore of the same group (> 1: more notes/s):"


if __name__ == "__main__":
    sys.exit(main())
