"""Where the Redis checkpointer's bytes go, and what two layout changes would save.

Plays the chat workload (``_chat.py``: ``--threads`` conversations of ``--turns`` turns,
round-robin) on LangGraph's ``SqliteSaver`` and on statekeeper's ``RedisCheckpointer``
(``$REDIS_URL``, default the local server, under a fresh key prefix deleted afterwards),
interleaved turn by turn, then prints:

* bytes: the SQLite file (as ``chat_workload.py`` measures it) and the sum of ``MEMORY
  USAGE`` of the prefix's keys, with their ratio;
* the Redis keys by kind (the last part of their name: ``blobs``, ``cp``, ``refs``...),
  with their entries (hash fields, sorted-set members), the bytes of their fields and
  values and what Redis spends per entry beyond them;
* two estimates, each measured by writing a rebuilt copy of the thread keys it changes
  into scratch keys and taking their ``MEMORY USAGE``: *versions unpadded* (every channel
  version in a field, a reference or a record written without the 29 leading zeros of
  its 32-digit counter, as ``~<counter>.<rest>``), and, on top of it, *one refs entry
  per value* (a value's reference count, CRC and delta base in one field of ``refs``,
  instead of three). Neither is a layout statekeeper writes today: they show what a new
  Redis layout version would buy.

Standalone Redis only (the scratch keys are not in the thread's slot). Nothing is
asserted: it is a benchmark.

    .venv/bin/python benchmarks/redis_bytes.py                   # 3 threads x 200 turns
    .venv/bin/python benchmarks/redis_bytes.py --threads 1 --turns 20 --json
"""

import argparse
import re
import sys
import tempfile
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis
from _chat import build_graph, thread_config, turn_input
from _report import Progress, as_json, ratio_table, table
from _savers import open_langgraph_sqlite, redis_url

from statekeeper.checkpointers import open_checkpointer

# A version inside a key or a record: ``"`` and a 32-digit counter with its leading zeros.
_PADDED = re.compile(rb'"0{20,}(\d+\.)')
_CRC, _BASE, _WRITES, _STAMP = b"\xff", b"\xfe", b"\xfd", b"\xff"  # see _lua.py, audit.py
_REWRITTEN = ("blobs", "refs", "cp", "writes", "wix", "ids", "ns")  # thread keys


def unpadded(data: bytes) -> bytes:
    """``data`` with every padded version written as ``~<counter>.`` (the estimate)."""
    return _PADDED.sub(rb"~\1", data)


def merged_refs(fields: dict[bytes, bytes]) -> dict[bytes, bytes]:
    """A ``refs`` hash with one entry per value field: its count, CRC and base, joined."""
    per_value: dict[bytes, list[bytes]] = {}
    kept: dict[bytes, bytes] = {}
    for field, value in fields.items():
        if field == _STAMP or field.startswith(_WRITES):
            kept[field] = value
        elif field.startswith((_CRC, _BASE)):
            per_value.setdefault(field[1:], []).append(field[:1] + value)
        else:
            per_value.setdefault(field, []).append(b"n" + value)
    return {**kept, **{field: b"|".join(parts) for field, parts in per_value.items()}}


def kind_of(key: bytes) -> str:
    return key.rsplit(b":", 1)[-1].decode("utf-8", "replace")


Rows = list[dict[str, Any]]


class Keys:
    """The keys under one prefix, measured (and copied into scratch keys) on one client."""

    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self.client, self.prefix = client, prefix
        self.keys = sorted(client.scan_iter(match=f"{prefix}:*", count=1000))

    def usage(self, key: bytes | str) -> int:
        return int(self.client.memory_usage(key, samples=0) or 0)

    def breakdown(self) -> list[dict[str, Any]]:
        """Per kind of key: how many keys, entries, field and value bytes, MEMORY USAGE."""
        kinds: dict[str, Counter[str]] = {}
        for key in self.keys:
            found = kinds.setdefault(kind_of(key), Counter(dict.fromkeys(BREAKDOWN, 0)))
            found["keys"] += 1
            found["bytes"] += self.usage(key)
            kind = self.client.type(key)
            if kind == b"hash":
                for field, value in self.client.hgetall(key).items():
                    found["entries"] += 1
                    found["field_bytes"] += len(field)
                    found["value_bytes"] += len(value)
            elif kind == b"zset":
                for member in self.client.zrange(key, 0, -1):
                    found["entries"] += 1
                    found["field_bytes"] += len(member)
            else:
                found["entries"] += 1
        rows = []
        for kind, found in sorted(kinds.items(), key=lambda item: -item[1]["bytes"]):
            spare = found["bytes"] - found["field_bytes"] - found["value_bytes"]
            rows.append(
                {"saver": kind, **found, "overhead_per_entry": spare / max(found["entries"], 1)}
            )
        return rows

    def rebuilt(self, merge_refs: bool) -> int:
        """MEMORY USAGE of every key, those in :data:`_REWRITTEN` rebuilt unpadded (and
        ``refs`` merged) in a scratch key, measured and deleted."""
        total = 0
        for key in self.keys:
            if kind_of(key) not in _REWRITTEN:
                total += self.usage(key)
                continue
            scratch = f"{self.prefix}:scratch:{uuid.uuid4().hex}"
            if self.client.type(key) == b"hash":
                fields = self.client.hgetall(key)
                if merge_refs and kind_of(key) == "refs":
                    fields = merged_refs(fields)
                self.client.hset(
                    scratch, mapping={unpadded(f): unpadded(v) for f, v in fields.items()}
                )
            else:
                members = self.client.zrange(key, 0, -1, withscores=True)
                self.client.zadd(scratch, {unpadded(m): score for m, score in members})
            total += self.usage(scratch)
            self.client.unlink(scratch)
        return total


@contextmanager
def redis_prefix(url: str) -> Iterator[tuple[redis.Redis, str]]:
    """A client and a fresh key prefix, whose keys are deleted afterwards."""
    client = redis.Redis.from_url(url)
    prefix = f"bench-bytes-{uuid.uuid4().hex}"
    try:
        yield client, prefix
    finally:
        for key in client.scan_iter(match=f"{prefix}:*", count=1000):
            client.unlink(key)
        client.close()


def measure(threads: int, turns: int, url: str) -> tuple[Rows, Rows]:
    """The rows (bytes of each saver and estimate) and the breakdown by key kind."""
    progress = Progress(turns, f"turns x {threads} threads x 2 savers")
    with (
        tempfile.TemporaryDirectory(prefix="statekeeper-bytes-") as tmp,
        redis_prefix(url) as (client, prefix),
    ):
        with (
            open_langgraph_sqlite(Path(tmp) / "sqlite.db") as theirs,
            open_checkpointer(url, prefix=prefix) as ours,
        ):
            graphs = [build_graph(theirs.saver), build_graph(ours)]
            for turn in range(1, turns + 1):
                for thread in range(threads):
                    for graph in graphs if turn % 2 else graphs[::-1]:
                        graph.invoke(turn_input(thread, turn), thread_config(thread))
                progress.advance()
        progress.close()
        keys = Keys(client, prefix)
        measured = {
            "LangGraph SqliteSaver": theirs.size(),
            "statekeeper RedisCheckpointer": sum(keys.usage(key) for key in keys.keys),
            "Redis, versions unpadded (estimate)": keys.rebuilt(merge_refs=False),
            "Redis, versions unpadded + one refs entry per value (estimate)": keys.rebuilt(
                merge_refs=True
            ),
        }
        rows = [
            {"saver": saver, "langgraph": "LangGraph" in saver, "bytes": size, "error": None}
            for saver, size in measured.items()
        ]
        return rows, keys.breakdown()


BREAKDOWN = {
    "keys": "keys",
    "entries": "entries",
    "field_bytes": "field bytes",
    "value_bytes": "value bytes",
    "bytes": "MEMORY USAGE",
    "overhead_per_entry": "beyond them, per entry",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=3, help="conversations (default 3)")
    parser.add_argument("--turns", type=int, default=200, help="turns per thread (default 200)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of markdown")
    args = parser.parse_args(argv)
    rows, kinds = measure(args.threads, args.turns, redis_url())
    if args.json:
        payload = {"threads": args.threads, "turns": args.turns, "keys": kinds}
        print(as_json(payload, rows, ["bytes"]))
        return 0
    print(f"Chat workload: {args.threads} threads x {args.turns} turns, bytes stored\n")
    print("\n".join(table(rows, {"bytes": "bytes stored"})))
    print("\n".join(ratio_table(rows, {"bytes": "bytes stored"})))
    print("\nThe Redis keys by kind:\n")
    print("\n".join(table(kinds, BREAKDOWN, first="kind")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
