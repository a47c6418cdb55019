"""The benchmark scripts still run: a tiny workload through each, every row without error.

Nothing here looks at the numbers (no timed assertions); it only keeps the scripts from
rotting as the code under them changes.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _run(script: str, *args: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args],
        cwd=cwd,
        env=env,
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
        *("--threads", "1", "--turns", "3"),
        *("--savers", "memory,sqlite,commit,ours,file,file-nosync,file-floor", "--json"),
        cwd=tmp_path,
    )
    results = json.loads(out)["results"]
    assert [r["saver"] for r in results] == [
        "LangGraph InMemorySaver",
        "LangGraph SqliteSaver",
        "SQLite floor (InMemorySaver + 1 commit per write)",
        "statekeeper SqliteCheckpointer",
        "statekeeper FileCheckpointer",
        "statekeeper FileCheckpointer (fsync=false)",
        "file floor (InMemorySaver + 1 flushed line per write)",
    ]
    assert all(r["error"] is None for r in results)
    stored = [r["bytes"] is not None for r in results]
    assert stored == [True, True, False, True, True, True, False]
    assert all(r["checkpoints_per_thread"] == 9 for r in results)


def _postgres_url() -> str:
    """$POSTGRES_URL or the local server; skipped off CI when neither answers."""
    url = os.environ.get("POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    parts = urlsplit(url)
    try:
        socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 5432), 2).close()
    except OSError:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(f"no PostgreSQL answers at {parts.hostname}:{parts.port}")
    return url


def test_chat_workload_runs_the_networked_rows(tmp_path: Path) -> None:
    from tests.redis_servers import REDIS

    env = {**os.environ, "REDIS_URL": REDIS.standalone(), "POSTGRES_URL": _postgres_url()}
    out = _run(
        "chat_workload.py",
        *("--threads", "1", "--turns", "3", "--savers", "memory,postgres,floor,redis", "--json"),
        cwd=tmp_path,
        env=env,
    )
    payload = json.loads(out)
    results = payload["results"]
    assert [r["saver"] for r in results] == [
        "LangGraph InMemorySaver",
        "LangGraph PostgresSaver",
        "loopback floor (InMemorySaver + 1 PING per call)",
        "statekeeper RedisCheckpointer",
    ]
    assert all(r["error"] is None for r in results)
    assert [r["bytes"] is None for r in results] == [False, False, True, False]
    assert all(r["bytes"] is None or r["bytes"] > 0 for r in results)
    assert all(r["checkpoints_per_thread"] == 9 for r in results)
    assert all(r["first_ms"] > 0 and r["all_ms"] > 0 and r["last_ms"] > 0 for r in results)
    # every row but LangGraph's own is compared with both LangGraph savers
    assert len(payload["ratios"]) == 4


def test_redis_floor_runs_every_row(tmp_path: Path) -> None:
    from tests.redis_servers import REDIS

    out = _run(
        "redis_floor.py",
        *("--threads", "1", "--turns", "2", "--cpu", "10", "--script", "10"),
        cwd=tmp_path,
        env={**os.environ, "REDIS_URL": REDIS.standalone()},
    )
    rows = [line.split("|")[1].strip() for line in out.splitlines() if line.startswith("| ")]
    assert rows[0] == "saver"
    assert rows[1:4] == ["InMemorySaver", "floor", "floor + 10 us CPU"]
    assert rows[4].startswith("floor + 10 us script (measured ")  # its µs vary
    assert rows[5:] == ["RedisCheckpointer"]


def test_redis_bytes_breaks_the_keys_down_and_leaves_none(tmp_path: Path) -> None:
    import redis

    from tests.redis_servers import REDIS

    url = REDIS.standalone()
    out = _run(
        "redis_bytes.py",
        *("--threads", "1", "--turns", "3", "--json"),
        cwd=tmp_path,
        env={**os.environ, "REDIS_URL": url},
    )
    payload = json.loads(out)
    sizes = {row["saver"]: row["bytes"] for row in payload["results"]}
    measured = sizes["statekeeper RedisCheckpointer"]
    unpadded = sizes["Redis, versions unpadded (estimate)"]
    merged = sizes["Redis, versions unpadded + one refs entry per value (estimate)"]
    assert 0 < merged <= unpadded < measured < sizes["LangGraph SqliteSaver"]
    kinds = {row["saver"]: row for row in payload["keys"]}
    assert {"blobs", "cp", "refs", "writes"} <= set(kinds)
    assert sum(row["bytes"] for row in kinds.values()) == measured
    client = redis.Redis.from_url(url)
    try:
        assert not list(client.scan_iter(match="bench-bytes-*"))
    finally:
        client.close()


def test_global_scan_runs_every_saver(tmp_path: Path) -> None:
    from tests.redis_servers import REDIS

    out = _run(
        "global_scan.py",
        *("--threads", "5", "--checkpoints", "2", "--samples", "1", "--json"),
        cwd=tmp_path,
        env={**os.environ, "REDIS_URL": REDIS.standalone(), "POSTGRES_URL": _postgres_url()},
    )
    payload = json.loads(out)
    results = payload["results"]
    assert [r["saver"] for r in results] == [
        "LangGraph InMemorySaver",
        "LangGraph SqliteSaver",
        "statekeeper SqliteCheckpointer (index_metadata=user)",
        "statekeeper FileCheckpointer (fsync=false)",
        "statekeeper RedisCheckpointer (index_metadata=user)",
        "statekeeper PostgresCheckpointer",
    ]
    assert all(r["error"] is None for r in results), results
    assert all(r[c] > 0 for r in results for c in ("list_ms", "filter_ms", "threads_ms"))
    ratio = "statekeeper RedisCheckpointer (index_metadata=user) / LangGraph SqliteSaver"
    assert ratio in payload["ratios"]


def test_thread_growth_runs(tmp_path: Path) -> None:
    out = _run("thread_growth.py", "--sizes", "10", "--samples", "3", cwd=tmp_path)
    assert "file" in out
    assert "sqlite" in out


@pytest.mark.slow
def test_contention_runs_and_its_guarantees_hold(tmp_path: Path) -> None:
    out = _run(
        "contention.py",
        *("--processes", "2", "--seconds", "1", "--backends", "sqlite,file"),
        *("--modes", "enqueue,reject,none", "--json"),
        cwd=tmp_path,
    )
    rows = json.loads(out)["results"]
    assert [(r["backend"], r["mode"]) for r in rows] == [
        (backend, mode) for backend in ("sqlite", "file") for mode in ("enqueue", "reject", "none")
    ]
    for row in rows:
        assert row["runs"] > 0
        if row["mode"] != "none":
            assert row["holds"], row
            assert row["found"] == row["expected"]
            assert row["refused_with_checkpoints"] == 0


def _networked_env() -> dict[str, str]:
    from tests.redis_servers import REDIS

    return {**os.environ, "REDIS_URL": REDIS.standalone(), "POSTGRES_URL": _postgres_url()}


def test_long_thread_runs_every_saver_with_and_without_summarization(tmp_path: Path) -> None:
    out = _run("long_thread.py", "--turns", "3", "--json", cwd=tmp_path, env=_networked_env())
    payload = json.loads(out)
    savers = [
        "LangGraph InMemorySaver",
        "LangGraph SqliteSaver",
        "statekeeper SqliteCheckpointer",
        "statekeeper FileCheckpointer",
        "statekeeper RedisCheckpointer",
    ]
    rows = payload["results"]
    assert [r["saver"] for r in rows] == savers + [f"{s} + SummarizationNode" for s in savers]
    for row in rows:
        assert row["error"] is None, row
        assert row["bytes"] > 0
        assert row["first_ms"] > 0
        assert row["last_ms"] > 0
        assert row["messages"] == 6  # 3 turns, no compaction yet at this size
    # each of ours against both LangGraph rows of its own variant only
    assert len(payload["ratios"]) == 2 * 3 * 2
    assert all(
        ("SummarizationNode" in name.split(" / ")[0]) == ("SummarizationNode" in name)
        and name.count("SummarizationNode") in (0, 2)
        for name in payload["ratios"]
    )


def test_delta_bases_runs_a_linear_twin_beside_each_row(tmp_path: Path) -> None:
    out = _run(
        "delta_bases.py",
        *("--threads", "1", "--turns", "8", "--json"),
        *("--savers", "memory,ours,ours-linear,file,file-linear"),
        cwd=tmp_path,
    )
    rows = {r["saver"]: r for r in json.loads(out)["results"]}
    assert list(rows) == [
        "LangGraph InMemorySaver",
        "statekeeper SqliteCheckpointer",
        "statekeeper SqliteCheckpointer, linear deltas",
        "statekeeper FileCheckpointer",
        "statekeeper FileCheckpointer, linear deltas",
    ]
    assert all(r["error"] is None and r["checkpoints_per_thread"] == 24 for r in rows.values())
    # the twin really builds each delta on the version before it: it stores each message
    # once, where skip-deltas store some again (file sizes are exact; SQLite's are pages)
    shipped = rows["statekeeper FileCheckpointer"]["bytes"]
    assert rows["statekeeper FileCheckpointer, linear deltas"]["bytes"] < shipped


def test_fleet_runs_every_async_saver(tmp_path: Path) -> None:
    out = _run(
        "fleet.py",
        *("--conversations", "3", "--turns", "2", "--json"),
        cwd=tmp_path,
        env=_networked_env(),
    )
    payload = json.loads(out)
    assert (payload["conversations"], payload["turns"]) == (3, 2)
    rows = payload["results"]
    assert [r["saver"] for r in rows] == [
        "LangGraph InMemorySaver",
        "LangGraph AsyncSqliteSaver",
        "LangGraph AsyncPostgresSaver",
        "statekeeper SqliteCheckpointer",
        "statekeeper FileCheckpointer",
        "statekeeper RedisCheckpointer",
        "statekeeper PostgresCheckpointer",
    ]
    for row in rows:
        assert row["error"] is None, row
        assert row["turns_per_s"] > 0
        assert 0 < row["p50_ms"] <= row["p95_ms"]
    assert len(payload["ratios"]) == 4 * 3


def test_fleet_runs_its_floors_only_when_asked(tmp_path: Path) -> None:
    out = _run(
        "fleet.py",
        *("--conversations", "2", "--turns", "1"),
        *("--savers", "memory,yield,hop,pg-floor,commit,file-floor,redis-floor,file-nosync"),
        "--json",
        cwd=tmp_path,
        env=_networked_env(),
    )
    rows = json.loads(out)["results"]
    assert [r["saver"] for r in rows] == [
        "LangGraph InMemorySaver",
        "floor: InMemorySaver + 1 await sleep(0) per call",
        "floor: InMemorySaver, each call in a worker thread",
        "floor: InMemorySaver + 1 PostgreSQL statement per call (a commit per write)",
        "floor: InMemorySaver served in batches + 1 SQLite commit per batch",
        "floor: InMemorySaver served in batches + 1 flushed line per write",
        "floor: InMemorySaver served in batches + 1 PING per call",
        "statekeeper FileCheckpointer (fsync=false)",
    ]
    for row in rows:
        assert row["error"] is None, row
        assert row["turns_per_s"] > 0


def test_fleet_skips_postgres_saying_why_when_it_does_not_answer(tmp_path: Path) -> None:
    with socket.socket() as unused:  # a port nobody listens on
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    env = {**os.environ, "POSTGRES_URL": f"postgresql://postgres@127.0.0.1:{port}/postgres"}
    done = subprocess.run(
        [
            sys.executable,
            str(BENCHMARKS / "fleet.py"),
            *("--conversations", "1", "--turns", "1"),
            *("--savers", "memory,postgres", "--json"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    rows = json.loads(done.stdout)["results"]
    assert rows[0]["error"] is None
    assert rows[1]["error"].startswith(f"no PostgreSQL answers at 127.0.0.1:{port}")
    assert "skipping LangGraph AsyncPostgresSaver" in done.stderr


def test_peak_rss_runs_every_saver_in_a_process_of_its_own(tmp_path: Path) -> None:
    out = _run(
        "peak_rss.py",
        *("--threads", "1", "--turns", "2", "--json"),
        cwd=tmp_path,
        env=_networked_env(),
    )
    payload = json.loads(out)
    rows = payload["results"]
    assert [r["saver"] for r in rows] == [
        "LangGraph InMemorySaver",
        "LangGraph SqliteSaver",
        "LangGraph PostgresSaver",
        "statekeeper SqliteCheckpointer",
        "statekeeper FileCheckpointer",
        "statekeeper RedisCheckpointer",
        "statekeeper PostgresCheckpointer",
    ]
    for row in rows:
        assert row["error"] is None, row
        assert 0 < row["baseline_mib"] <= row["peak_mib"]
        assert row["workload_mib"] == row["peak_mib"] - row["baseline_mib"]
    assert len(payload["ratios"]) == 4 * 3


def test_startup_times_the_commands_asked_for(tmp_path: Path) -> None:
    out = _run(
        "startup.py",
        *("--runs", "1", "--threads", "1", "--interrupted", "--commands", "help,threads,show"),
        "--json",
        cwd=tmp_path,
    )
    payload = json.loads(out)
    rows = payload["results"]
    assert [r["saver"] for r in rows] == [
        "python -c pass",
        "import langgraph.checkpoint.base",
        "statekeeper --help",
        "statekeeper threads",
        "statekeeper show t0",
    ]
    assert all(r["error"] is None and r["seconds"] > 0 and r["runs"] == 1 for r in rows)
    assert all(r["cpu_seconds"] > 0 for r in rows[1:])  # the interpreter alone may round to 0
    assert rows[0]["vs_python"] == 1
    assert set(payload["ratios"]) == {
        f"{r['saver']} / import langgraph.checkpoint.base" for r in rows if not r["langgraph"]
    }


def test_memory_writes_runs_every_store_with_and_without_embeddings(tmp_path: Path) -> None:
    from tests.redis_servers import REDIS

    env = {**os.environ, "REDIS_URL": REDIS.standalone(), "POSTGRES_URL": _postgres_url()}
    out = _run("memory_writes.py", "--notes", "8", "--rounds", "1", "--json", cwd=tmp_path, env=env)
    payload = json.loads(out)
    results = {r["key"]: r for r in payload["results"]}
    assert payload["notes"] == 8
    assert sorted(results) == sorted(
        f"{row}-{group}"
        for row in ("langgraph", "sqlite", "file", "redis", "postgres", "memory")
        for group in ("plain", "embed")
    )
    assert all(r["error"] is None and r["notes_per_s"] > 0 for r in results.values())
    for backend in ("sqlite", "file", "redis", "postgres"):  # vectors stored with the notes
        assert results[f"{backend}-embed"]["vector_bytes_per_note"] > 0
    assert (
        "statekeeper redis, embed=static / LangGraph InMemoryStore, embed=static"
        in (payload["ratios"])
    )


def test_floors_make_every_write_durable_before_answering(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file and served floors measure what they say: each write's id is flushed (or
    committed with its batch) before the call returns, and a failed flush fails the call."""
    import asyncio

    monkeypatch.syspath_prepend(str(BENCHMARKS))
    from _chat import build_graph, thread_config, turn_input
    from _floors import FileFloor, ServedFloor

    file_floor = FileFloor(tmp_path / "floor.log")
    build_graph(file_floor).invoke(turn_input(0, 1), thread_config(0))
    file_floor.log.close()
    flushed = (tmp_path / "floor.log").read_text().split()
    checkpoints = [t.checkpoint["id"] for t in file_floor.list(None)]
    assert set(checkpoints) <= set(flushed)
    assert len(flushed) > len(checkpoints)  # the tasks' writes too

    batches: list[list[str | None]] = []
    served = ServedFloor(lambda ids: batches.append(list(ids)))

    async def fleet() -> None:
        graph = build_graph(served)
        await asyncio.gather(*(graph.ainvoke(turn_input(i, 1), thread_config(i)) for i in range(3)))

    asyncio.run(fleet())
    served.close()
    committed = [what for batch in batches for what in batch]
    assert {t.checkpoint["id"] for t in served.list(None)} <= set(committed)

    def fail(ids: object) -> None:
        raise OSError("disk full")

    failing = ServedFloor(fail)
    with pytest.raises(OSError, match="disk full"):
        asyncio.run(build_graph(failing).ainvoke(turn_input(0, 1), thread_config(0)))
    failing.close()
