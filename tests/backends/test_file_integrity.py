"""The file backend never returns a wrong value and never hides a loss: every stored
record a read turns into state is checked, and a log that lacks committed lines is
damage (docs/file-backend.md, "Integrity").

Each trial copies one stored directory (two threads, a subgraph namespace, values inline
and in files, append deltas, pending writes), damages it one way — a bit flipped, a cut
at any byte or at a line boundary, a line deleted, a file deleted — and then checks:

* every read (``get_tuple`` of each checkpoint and of the newest, ``list``, ``get_writes``)
  returns exactly what was stored or raises ``CorruptCheckpointError``: nothing else
  escapes, nothing is silently different or missing;
* ``verify()`` reports it, with the kind of record at fault;
* ``on_corrupt="fallback"`` returns a stored checkpoint exactly (or none), and logs a
  warning whenever it is not the newest;
* ``verify(quarantine=True, repair=True)`` leaves a directory that ``verify()`` finds
  intact, and whose every checkpoint is still exactly what was stored.

Crashes are not damage: a torn last line, or a whole line written before its head was,
reads as before and is repaired by the next writer (also under a real SIGKILL).
Trials are seeded; the whole file runs in seconds.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import logging
import os
import random
import shutil
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from statekeeper.checkpointers import FileCheckpointer
from statekeeper.errors import CorruptCheckpointError, Damage
from tests.backends.test_file import fork, put_step, read_lines
from tests.checkpointers.test_contract import cfg, cp_id

RECORDS = {"checkpoint", "metadata", "writes", "value", "delta", "index", "head"}
LOGGER = "statekeeper.backends.file.checkpointer"
Damager = Callable[[Path], None]


# -- the stored directory every trial damages a copy of ---------------------------------


def _fill(root: Path) -> None:
    """Thread ``t``: 8 checkpoints (a ``log`` value each, a large ``blob`` in a value file
    every third, a growing ``history`` stored as append deltas, one task's writes each);
    its subgraph namespace ``child:1``: 3 checkpoints; thread ``u``: 2 checkpoints."""
    with FileCheckpointer(root, fsync=False) as saver:
        for thread, ns, steps in (("t", "", 8), ("t", "child:1", 3), ("u", "", 2)):
            versions: dict[str, str] = {}
            parent = cfg(thread, ns)
            for step in range(1, steps + 1):
                parent = put_step(saver, parent, versions, step, history=True)


Scope = tuple[str, str]  # (thread, namespace)
SCOPES: list[Scope] = [("t", ""), ("t", "child:1"), ("u", "")]


def _snapshot(saver: FileCheckpointer) -> dict[str, Any]:
    """Everything a reader can get, read from an intact directory."""
    found: dict[str, Any] = {"all": list(saver.list(None))}
    for scope in SCOPES:
        listed = list(saver.list(cfg(*scope)))
        found[scope] = {
            "list": listed,
            "writes": {cp_id(t.config): saver.get_writes(t.config) for t in listed},
        }
    return found


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    root = tmp_path_factory.mktemp("template") / "store"
    _fill(root)
    with FileCheckpointer(root) as saver:
        return root, _snapshot(saver)


# -- the oracle --------------------------------------------------------------------------


def _exact_or_corrupt(read: Callable[[], Any], expected: Any) -> bool:
    """Whether ``read()`` raised CorruptCheckpointError (then True) — otherwise it must
    return exactly ``expected``. Any other exception fails the test."""
    damage: Damage | None = None
    try:
        got = read()
    except CorruptCheckpointError as error:
        damage = error.damage
    if damage is not None:
        assert (damage.backend, damage.record in RECORDS) == ("file", True), damage
        return True
    assert got == expected, "a read returned something else than what was stored"
    return False


def _check_reads(saver: FileCheckpointer, snapshot: dict[str, Any]) -> int:
    """Every read returns what was stored or raises; how many raised."""
    raised = int(_exact_or_corrupt(lambda: list(saver.list(None)), snapshot["all"]))
    for scope in SCOPES:
        stored = snapshot[scope]
        newest = stored["list"][0]
        raised += _exact_or_corrupt(lambda s=scope: saver.get_tuple(cfg(*s)), newest)
        raised += _exact_or_corrupt(lambda s=scope: list(saver.list(cfg(*s))), stored["list"])
        for tup in stored["list"]:
            config = tup.config
            raised += _exact_or_corrupt(lambda c=config: saver.get_tuple(c), tup)
            expected = stored["writes"][cp_id(config)]
            raised += _exact_or_corrupt(lambda c=config: saver.get_writes(c), expected)
    return raised


def _check_fallback(root: Path, snapshot: dict[str, Any], caplog: pytest.LogCaptureFixture) -> None:
    """Fallback serves a stored checkpoint exactly (or none), and says so when it is not
    the newest."""
    with FileCheckpointer(root, on_corrupt="fallback") as lenient:
        for scope in SCOPES:
            stored = snapshot[scope]["list"]
            caplog.clear()
            with caplog.at_level(logging.WARNING, logger=LOGGER):
                try:
                    got = lenient.get_tuple(cfg(*scope))
                except CorruptCheckpointError:
                    continue  # damage fallback cannot step over (a missing folder's id)
            assert got is None or got in stored, "fallback returned something never stored"
            if got != stored[0]:
                assert caplog.records, "fallback served an older checkpoint without a word"


def _check_trial(
    root: Path, snapshot: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> list[Damage]:
    """The oracle of one damaged directory (see the module docstring)."""
    with FileCheckpointer(root) as saver:
        _check_reads(saver, snapshot)
        found = saver.verify()
        assert found, "verify() missed the damage"
        assert all(d.backend == "file" and d.record in RECORDS for d in found), found
        assert saver.verify() == found  # verify alone changes nothing
    _check_fallback(root, snapshot, caplog)
    with FileCheckpointer(root, fsync=False) as saver:  # no flushes: faster, same checks
        saver.verify(quarantine=True, repair=True)
        assert saver.verify() == []
        for scope in SCOPES:  # what is left reads, and is what was stored
            stored = snapshot[scope]
            for tup in saver.list(cfg(*scope)):
                assert tup in stored["list"]
                assert saver.get_tuple(tup.config) == tup
                assert saver.get_writes(tup.config) == stored["writes"][cp_id(tup.config)]
    return found


def _run(
    template: tuple[Path, dict[str, Any]],
    tmp_path: Path,
    damagers: list[tuple[str, Damager]],
    caplog: pytest.LogCaptureFixture,
) -> dict[str, set[str | None]]:
    """Run one trial per damager; return the records verify named, per damager."""
    source, snapshot = template
    named: dict[str, set[str | None]] = {}
    for i, (label, damage) in enumerate(damagers):
        root = tmp_path / f"trial-{i}"
        shutil.copytree(source, root)
        damage(root)
        try:
            found = _check_trial(root, snapshot, caplog)
        except AssertionError as failure:
            raise AssertionError(f"{label}: {failure}") from failure
        named[label] = {d.record for d in found}
        shutil.rmtree(root)
    return named


# -- ways to damage a file ---------------------------------------------------------------

NS = "threads/t/~"
CHILD = "threads/t/child~3a1"


def _lines(path: Path) -> list[int]:
    """Offsets where each line starts (the header's first)."""
    data = path.read_bytes()
    starts, at = [0], data.find(b"\n")
    while at != -1 and at + 1 < len(data):
        starts.append(at + 1)
        at = data.find(b"\n", at + 1)
    return starts


def cut(relative: str, at: int) -> tuple[str, Damager]:
    def damage(root: Path) -> None:
        path = root / relative
        path.write_bytes(path.read_bytes()[:at])

    return f"cut {relative} at byte {at}", damage


def flip(relative: str, at: int, bit: int = 0) -> tuple[str, Damager]:
    def damage(root: Path) -> None:
        path = root / relative
        data = bytearray(path.read_bytes())
        data[at] ^= 1 << bit
        path.write_bytes(bytes(data))

    return f"flip bit {bit} of byte {at} of {relative}", damage


def drop_line(relative: str, start: int, end: int) -> tuple[str, Damager]:
    def damage(root: Path) -> None:
        path = root / relative
        data = path.read_bytes()
        path.write_bytes(data[:start] + data[end:])

    return f"delete the line at byte {start} of {relative}", damage


def delete(relative: str) -> tuple[str, Damager]:
    def damage(root: Path) -> None:
        path = root / relative
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()

    return f"delete {relative}", damage


def _regions(path: Path, key: bytes) -> Iterator[tuple[int, int]]:
    """The byte ranges of the JSON values after ``key`` in a log (e.g. ``b'"metadata":'``)."""
    data = path.read_bytes()
    at = data.find(key)
    while at != -1:
        start = at + len(key)
        yield start, min(data.find(b"\n", start), start + 60)
        at = data.find(key, start)


def _template_path(template: tuple[Path, dict[str, Any]], relative: str) -> Path:
    return template[0] / relative


# -- the trials --------------------------------------------------------------------------

LOGS = [f"{NS}/checkpoints", f"{NS}/writes", f"{CHILD}/checkpoints", f"{CHILD}/writes"]


@pytest.mark.parametrize("log", LOGS)
def test_a_log_cut_at_any_line_boundary_is_damage_never_a_shorter_history(
    template: tuple[Path, dict[str, Any]],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    log: str,
) -> None:
    path = _template_path(template, log)
    size = path.stat().st_size
    damagers = [cut(log, at) for at in [*_lines(path), size - 1] if at < size]
    record = "writes" if log.endswith("writes") else "checkpoint"
    for label, records in _run(template, tmp_path, damagers, caplog).items():
        assert records & {record, "index"}, label


@pytest.mark.parametrize("log", LOGS)
def test_a_log_cut_at_any_byte_or_with_a_bit_flipped_is_damage(
    template: tuple[Path, dict[str, Any]],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    log: str,
) -> None:
    rng = random.Random(f"bytes {log}")
    size = _template_path(template, log).stat().st_size
    damagers = [cut(log, rng.randrange(size)) for _ in range(6)]
    damagers += [flip(log, rng.randrange(size), rng.randrange(8)) for _ in range(10)]
    _run(template, tmp_path, damagers, caplog)


@pytest.mark.parametrize("log", LOGS)
def test_a_line_deleted_from_a_log_is_damage(
    template: tuple[Path, dict[str, Any]],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    log: str,
) -> None:
    path = _template_path(template, log)
    starts = [*_lines(path), path.stat().st_size]
    damagers = [drop_line(log, a, b) for a, b in itertools.pairwise(starts[1:])]
    record = "writes" if log.endswith("writes") else "checkpoint"
    for label, records in _run(template, tmp_path, damagers, caplog).items():
        assert record in records, label


@pytest.mark.parametrize(
    ("key", "log"),
    [
        (b'"metadata":', f"{NS}/checkpoints"),  # metadata
        (b'"data":"', f"{NS}/checkpoints"),  # values stored inline
        (b'"base":', f"{NS}/checkpoints"),  # append deltas
        (b'"checkpoint":"', f"{NS}/checkpoints"),  # the checkpoint itself
        (b'"writes":[[', f"{NS}/writes"),  # pending writes
    ],
)
def test_a_bit_flipped_in_any_kind_of_record_is_damage(
    template: tuple[Path, dict[str, Any]],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    key: bytes,
    log: str,
) -> None:
    rng = random.Random(f"{key!r} {log}")
    regions = list(_regions(_template_path(template, log), key))
    assert regions
    damagers = [flip(log, rng.randrange(*rng.choice(regions)), rng.randrange(8)) for _ in range(8)]
    _run(template, tmp_path, damagers, caplog)


def _value_files(template: tuple[Path, dict[str, Any]]) -> list[str]:
    root = template[0]
    return sorted(str(p.relative_to(root)) for p in root.glob("threads/*/*/values/*"))


def test_a_value_file_flipped_cut_or_deleted_is_damage(
    template: tuple[Path, dict[str, Any]], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rng = random.Random("values")
    damagers = []
    for relative in _value_files(template):
        size = _template_path(template, relative).stat().st_size
        damagers += [flip(relative, rng.randrange(size), rng.randrange(8)), delete(relative)]
        damagers += [cut(relative, rng.randrange(size)), cut(relative, 0)]
    assert len(damagers) >= 8
    for label, records in _run(template, tmp_path, damagers, caplog).items():
        assert records & {"value", "delta"}, label


HEADS = [f"{NS}/checkpoints.head", f"{NS}/writes.head", f"{CHILD}/checkpoints.head"]


def test_a_head_flipped_cut_or_deleted_is_damage(
    template: tuple[Path, dict[str, Any]], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rng = random.Random("heads")
    damagers = []
    for relative in HEADS:
        size = _template_path(template, relative).stat().st_size
        damagers += [flip(relative, rng.randrange(size), rng.randrange(8)) for _ in range(3)]
        damagers += [cut(relative, rng.randrange(size)), cut(relative, 0), delete(relative)]
    for label, records in _run(template, tmp_path, damagers, caplog).items():
        assert "head" in records, label


def test_deleted_files_and_folders_are_damage_never_no_data(
    template: tuple[Path, dict[str, Any]], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rng = random.Random("manifest")
    manifest = "threads/t/@namespaces"
    size = _template_path(template, manifest).stat().st_size
    damagers = [delete(log) for log in LOGS]
    damagers += [
        delete(CHILD),  # a subgraph's namespace folder
        delete(NS),  # the root namespace's folder
        delete(f"{NS}/values"),
        delete(manifest),
        flip(manifest, rng.randrange(size), rng.randrange(8)),
        cut(manifest, rng.randrange(size)),
    ]
    # both the log and its head (a copy that left out whole files)
    for log in LOGS:
        damagers.append((f"delete {log} and its head", _both(log)))
    _run(template, tmp_path, damagers, caplog)


def as_directory(relative: str) -> tuple[str, Damager]:
    def damage(root: Path) -> None:
        (root / relative).unlink()
        (root / relative).mkdir()

    return f"replace {relative} by a directory", damage


def test_a_log_or_head_replaced_by_a_directory_is_damage_that_names_it(
    template: tuple[Path, dict[str, Any]], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: "[Errno 21] Is a directory", naming no path, from every read, verify()
    and repair (which could not copy it aside)."""
    named = _run(template, tmp_path, [as_directory(p) for p in [*LOGS, *HEADS]], caplog)
    for label, records in named.items():
        assert records & {"index", "head"}, label
    source, _ = template
    for relative in (LOGS[0], HEADS[0]):
        root = tmp_path / "named"
        shutil.copytree(source, root)
        as_directory(relative)[1](root)
        with FileCheckpointer(root) as saver, pytest.raises(CorruptCheckpointError) as info:
            saver.get_tuple(cfg("t", ""))
        assert info.value.path == str(root / LOGS[0])
        assert "is a directory" in str(info.value)
        shutil.rmtree(root)


def _both(log: str) -> Damager:
    def damage(root: Path) -> None:
        (root / log).unlink()
        (root / f"{log}.head").unlink()

    return damage


# -- crashes are not damage ---------------------------------------------------------------


def _torn(relative: str) -> Damager:
    def damage(root: Path) -> None:
        with (root / relative).open("ab") as file:
            file.write(b'0123456789abcdef 0123456789abcdef {"checkpoint_id":"1f')

    return damage


@pytest.mark.parametrize("log", ["checkpoints", "writes"])
def test_a_torn_tail_reads_as_before_and_the_next_writer_cuts_it_off(
    template: tuple[Path, dict[str, Any]], tmp_path: Path, log: str
) -> None:
    source, snapshot = template
    root = tmp_path / "store"
    shutil.copytree(source, root)
    _torn(f"{NS}/{log}")(root)
    with FileCheckpointer(root) as saver:
        assert _check_reads(saver, snapshot) == 0
        assert saver.verify() == []
        newest = snapshot[("t", "")]["list"][0]
        versions = dict(newest.checkpoint["channel_versions"])
        put_step(saver, newest.config, versions, 9, history=True)
        assert b'"1f' not in (root / NS / log).read_bytes().rsplit(b"\n", 2)[-1]
        assert saver.verify() == []
        assert [t.metadata["step"] for t in saver.list(cfg("t"), limit=2)] == [9, 8]


def test_a_line_written_before_its_head_is_committed_and_the_next_writer_moves_the_head(
    tmp_path: Path,
) -> None:
    """The crash window between a line and its head: the line is whole (and was flushed),
    so it counts, by its own checksum and the one it chains to."""
    root = tmp_path / "store"
    with FileCheckpointer(root) as saver:
        versions: dict[str, str] = {}
        first = put_step(saver, cfg("t"), versions, 1)
        heads = {p: p.read_bytes() for p in (root / NS).glob("*.head")}
        second = put_step(saver, first, versions, 2)
    for path, data in heads.items():  # as if killed after each line, before its head
        path.write_bytes(data)
    with FileCheckpointer(root) as saver:
        assert saver.get_tuple(cfg("t")).config == second  # type: ignore[union-attr]
        assert [w[0] for w in saver.get_tuple(second).pending_writes or []] == ["task-2"]  # type: ignore[union-attr]
        assert saver.verify() == []
        third = put_step(saver, second, versions, 3)
        assert [t.config for t in saver.list(cfg("t"))] == [third, second, first]
        assert all(p.read_bytes() != heads[p] for p in heads)  # moved past every line
    (root / NS / "checkpoints").write_bytes((root / NS / "checkpoints").read_bytes()[:-10])
    with FileCheckpointer(root) as saver, pytest.raises(CorruptCheckpointError):
        saver.get_tuple(cfg("t"))  # now the head is up to date: a cut is damage


def _killed_between_line_and_head(root: Path) -> Callable[[int], None]:
    def work(out: int) -> None:
        from statekeeper.backends.file._log import view

        saver = FileCheckpointer(root)
        versions: dict[str, str] = {}
        parent = put_step(saver, cfg("t"), versions, 1)
        os.write(out, f"{cp_id(parent)}\n".encode())

        def die(fd: int, head: Any) -> None:
            os.write(out, b"line written\n")
            os.kill(os.getpid(), signal.SIGKILL)

        view.write_head = die  # type: ignore[assignment]
        put_step(saver, parent, versions, 2)

    return work


def test_a_writer_sigkilled_between_its_line_and_its_head_leaves_a_readable_log(
    tmp_path: Path,
) -> None:
    root = tmp_path / "store"
    pid, out = fork(_killed_between_line_and_head(root))
    first, said = read_lines(out, 2)
    os.close(out)
    _, status = os.waitpid(pid, 0)
    assert (said, os.WIFSIGNALED(status), os.WTERMSIG(status)) == (
        "line written",
        True,
        signal.SIGKILL,
    )
    with FileCheckpointer(root) as saver:
        listed = list(saver.list(cfg("t")))
        assert [t.metadata["step"] for t in listed] == [2, 1]  # its line is whole: it counts
        assert cp_id(listed[1].config) == first
        assert saver.verify() == []
        versions = dict(listed[0].checkpoint["channel_versions"])
        put_step(saver, listed[0].config, versions, 3)
        assert saver.verify() == []


@contextlib.contextmanager
def _no_warnings(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        yield
    assert not caplog.records


def test_an_intact_directory_reads_without_a_warning(
    template: tuple[Path, dict[str, Any]], caplog: pytest.LogCaptureFixture
) -> None:
    source, snapshot = template
    with _no_warnings(caplog), FileCheckpointer(source, on_corrupt="fallback") as saver:
        assert _check_reads(saver, snapshot) == 0
        assert saver.verify() == []


# -- through LangGraph ----------------------------------------------------------------------


class Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    turns: int


def _graph(saver: FileCheckpointer) -> Any:
    """A chat-like graph (``messages`` grows by appending: append deltas) that stops
    before its second node."""

    def answer(state: Chat) -> dict[str, Any]:
        reply = AIMessage(f"reply {state['turns']}: " + "word " * 50, id=f"ai-{state['turns']}")
        return {"messages": [reply], "turns": state["turns"] + 1}

    builder = StateGraph(Chat)
    builder.add_node("first", answer)
    builder.add_node("second", answer)
    builder.add_edge(START, "first")
    builder.add_edge("first", "second")
    builder.add_edge("second", END)
    return builder.compile(checkpointer=saver, interrupt_before=["second"])


def _chat(root: Path) -> None:
    with FileCheckpointer(root, fsync=False) as saver:
        graph = _graph(saver)
        for turn in range(4):
            config = {"configurable": {"thread_id": "chat"}}
            message = HumanMessage(f"question {turn}", id=f"human-{turn}")
            graph.invoke({"messages": [message], "turns": turn * 2}, config)
            if turn < 3:
                graph.invoke(None, config)  # the second node, then the next turn


def _graph_reads(root: Path) -> tuple[Any, Any]:
    """What LangGraph reads of the chat thread (state, and the result of resuming it),
    or the CorruptCheckpointError it raised instead."""
    config = {"configurable": {"thread_id": "chat"}}
    with FileCheckpointer(root, fsync=False) as saver:
        graph = _graph(saver)
        try:
            state = graph.get_state(config)
            snapshot = (state.values, state.next, state.config)
        except CorruptCheckpointError as error:
            snapshot = error
        try:
            result = graph.invoke(None, config)
        except CorruptCheckpointError as error:
            result = error
    return snapshot, result


def test_graph_get_state_and_resume_on_a_damaged_thread_are_exact_or_raise(
    tmp_path: Path,
) -> None:
    source = tmp_path / "chat"
    _chat(source)
    intact = tmp_path / "intact"
    shutil.copytree(source, intact)
    expected = _graph_reads(intact)
    assert expected[0][1] == ("second",)  # waiting before its second node
    rng = random.Random("graph")
    chat = "threads/chat/~"
    damagers = []
    for name in ("checkpoints", "writes"):
        log = f"{chat}/{name}"
        path = source / log
        damagers += [cut(log, at) for at in _lines(path)[1:]]
        damagers += [flip(log, rng.randrange(path.stat().st_size), rng.randrange(8))]
        damagers += [delete(log), delete(f"{log}.head")]
    damagers += [
        flip(str(p.relative_to(source)), rng.randrange(p.stat().st_size), rng.randrange(8))
        for p in sorted((source / chat).glob("values/*"))
    ]
    for i, (label, damage) in enumerate(damagers):
        root = tmp_path / f"trial-{i}"
        shutil.copytree(source, root)
        damage(root)
        state, resumed = _graph_reads(root)  # anything but CorruptCheckpointError fails
        for read, wanted in ((state, expected[0]), (resumed, expected[1])):
            if not isinstance(read, CorruptCheckpointError):
                assert read == wanted, f"{label}: LangGraph read something never stored"
        if label.startswith(f"cut {chat}/checkpoints"):  # never an older state instead
            assert isinstance(state, CorruptCheckpointError), label
            assert isinstance(resumed, CorruptCheckpointError), label


# -- directories written before logs had heads (format 2) ----------------------------------


def to_format_2(root: Path) -> None:
    """Make ``root`` what the previous statekeeper wrote (format 2, docs/file-backend.md):
    no heads, manifests or index; each line the checksum of its JSON and the JSON (no
    chained checksum); headers of version 2 without a generation."""
    shutil.rmtree(root / "index")
    for path in [*root.rglob("*.head"), *root.rglob("@namespaces")]:
        path.unlink()
    for log in [*root.rglob("checkpoints"), *root.rglob("writes")]:
        lines = []
        for i, line in enumerate(log.read_bytes().split(b"\n")[:-1]):
            raw = line[line.index(b"{") :]
            if i == 0:
                header = json.loads(raw)
                del header["generation"]
                header["version"] = 2
                raw = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
            lines.append(hashlib.sha256(raw).hexdigest()[:16].encode() + b" " + raw + b"\n")
        log.write_bytes(b"".join(lines))
    marker = {"format": "statekeeper-file", "version": 2}
    (root / "statekeeper.json").write_text(json.dumps(marker) + "\n")


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_a_format_2_directory_is_read_as_it_is_read_only_and_upgraded_read_write(
    template: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    source, snapshot = template
    root = tmp_path / "store"
    shutil.copytree(source, root)
    to_format_2(root)
    for lock in (root / "locks").iterdir():
        lock.unlink()
    old = _files(root)
    with FileCheckpointer(root, mode="ro") as saver:
        assert _check_reads(saver, snapshot) == 0
        assert saver.verify() == []
    assert _files(root) == old  # read-only: nothing created, not even a head or a lock

    with FileCheckpointer(root) as saver:  # read-write: upgraded on open
        assert _check_reads(saver, snapshot) == 0
        assert saver.verify() == []
    new = _files(root)
    logs = {name: data for name, data in old.items() if name.endswith(("checkpoints", "writes"))}
    assert {name: new[name] for name in logs} == logs  # no line rewritten
    added = sorted(name for name in set(new) - set(old) if not name.startswith("locks/"))
    heads = [
        f"{d}/{log}.head" for d in (CHILD, NS, "threads/u/~") for log in ("checkpoints", "writes")
    ]
    index = [f"index/{name}" for name in ("state", "journal-1", "journal-1.head")]
    index += ["index/checkpoints-1", "index/heads-1"]  # built from every log, once
    assert added == sorted([*heads, *index, "threads/t/@namespaces", "threads/u/@namespaces"])
    assert json.loads(new["statekeeper.json"])["version"] == 4

    with FileCheckpointer(root) as saver:  # new lines chain to the old ones
        newest = snapshot[("t", "")]["list"][0]
        put_step(saver, newest.config, dict(newest.checkpoint["channel_versions"]), 9)
        assert saver.verify() == []
        assert [t.metadata["step"] for t in saver.list(cfg("t"), limit=2)] == [9, 8]
    log = root / NS / "checkpoints"
    log.write_bytes(log.read_bytes()[: _lines(log)[-1]])  # cut its last line off
    with FileCheckpointer(root) as saver, pytest.raises(CorruptCheckpointError, match="missing"):
        saver.get_tuple(cfg("t"))  # now detected: the upgrade gave the log a head


@pytest.mark.parametrize("log", ["checkpoints", "writes"])
def test_a_damaged_header_is_reported_and_quarantine_keeps_every_line(
    template: tuple[Path, dict[str, Any]], tmp_path: Path, log: str
) -> None:
    """The head still says where the log ends, so only the header is damaged: no
    checkpoint is given up for it."""
    source, snapshot = template
    root = tmp_path / "store"
    shutil.copytree(source, root)
    flip(f"{NS}/{log}", 40)[1](root)  # inside the header's JSON
    with FileCheckpointer(root) as saver:
        _check_reads(saver, snapshot)
        found = saver.verify()
        assert {(d.record, Path(d.path).name) for d in found} >= {("index", log)}
        saver.verify(quarantine=True)
        assert saver.verify() == []
        assert _check_reads(saver, snapshot) == 0  # every checkpoint, with its writes
