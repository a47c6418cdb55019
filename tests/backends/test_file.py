"""What only the file backend promises: URLs and options, the documented layout, safe and
reversible file names, crash safety under real SIGKILLs, checksums, ``verify()`` and
quarantine, and several processes writing one directory.

The shared behaviour (conformance, filters, ordering, copy/prune/delete...) runs through
``BACKENDS`` in ``tests/conftest.py``. Child processes here are ``os.fork()``s of the test
process (fast: everything is imported already) that report progress through pipes; the
parent waits on those pipes, never on the clock.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import random
import re
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from langgraph.checkpoint.base import empty_checkpoint

from statekeeper.backends.file._layout import (
    NAME_LIMIT,
    decode_name,
    encode_name,
    file_name,
    is_hashed,
    value_file_name,
)
from statekeeper.backends.file._values import INLINE_LIMIT
from statekeeper.checkpointers import FileCheckpointer, open_checkpointer
from statekeeper.checkpointers.semantics import next_version
from statekeeper.errors import (
    ConfigurationError,
    CorruptCheckpointError,
    Damage,
    SchemaVersionError,
    StorageError,
    ThreadExistsError,
)
from tests.checkpointers.test_contract import cfg, cp_id, new_id, put, writes_of

# -- helpers ---------------------------------------------------------------------------


def payload(channel: str, version: str) -> dict[str, Any]:
    """The value a test stores for ``channel`` at ``version``: derived from both, so any
    loaded value can be checked; when it is a blob, more than INLINE_LIMIT bytes that do
    not compress, so it gets its own file in ``values/``."""
    seed = f"{channel}@{version}"
    digest = hashlib.sha256(seed.encode()).digest()
    if channel != "blob":
        return {"seed": seed, "raw": digest}
    size = INLINE_LIMIT + 1 + digest[0] * 40
    return {"seed": seed, "raw": hashlib.shake_256(seed.encode()).digest(size)}


def history(step: int) -> list[str]:
    """The ``history`` value at ``step``: a list that grows by appending (append deltas)."""
    return [f"entry {i}" for i in range(1, step + 1)]


def put_step(saver: Any, parent: dict, versions: dict, step: int, **kw: Any) -> dict:
    """Put checkpoint ``step`` after ``parent``: a new ``log`` version every step, a new
    ``blob`` version every third step; values are ``payload(channel, version)``. With
    ``history=True``, also a new ``history(step)`` every step."""
    new = {"log": next_version(versions.get("log"))}
    if step % 3 == 0:
        new["blob"] = next_version(versions.get("blob"))
    if kw.get("history"):
        new["history"] = next_version(versions.get("history"))
    versions.update(new)
    checkpoint = empty_checkpoint()
    checkpoint["id"] = kw.get("checkpoint_id") or new_id()
    checkpoint["channel_versions"] = dict(versions)
    checkpoint["channel_values"] = {ch: payload(ch, v) for ch, v in new.items()}
    if "history" in new:
        checkpoint["channel_values"]["history"] = history(step)
    config = saver.put(parent, checkpoint, {"step": step, **kw.get("metadata", {})}, new)
    saver.put_writes(config, [("log", f"w{step}")], f"task-{step}")
    return config  # type: ignore[no-any-return]


def check_loaded(tup: Any) -> None:
    """Every value of a checkpoint ``put_step`` made is the one for its version."""
    values = tup.checkpoint["channel_values"]
    for channel, version in tup.checkpoint["channel_versions"].items():
        if channel == "history":
            assert values[channel] == history(tup.metadata["step"])
        else:
            assert values[channel] == payload(channel, version)


def fork(work: Callable[[int], None]) -> tuple[int, int]:
    """Run ``work(write_fd)`` in a forked child; return (pid, read end of its pipe)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        status = 1
        try:
            os.close(read)
            work(write)
            status = 0
        finally:
            os._exit(status)
    os.close(write)
    return pid, read


def read_lines(fd: int, count: int) -> list[str]:
    """Read ``count`` lines from a child's pipe (fewer if it exits first)."""
    lines: list[str] = []
    buffer = b""
    while len(lines) < count:
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        buffer += chunk
        *done, buffer = buffer.split(b"\n")
        lines.extend(line.decode() for line in done)
    return lines


def all_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def log_lines(path: Path) -> list[dict[str, Any]]:
    """The JSON of every line of a ``checkpoints`` or ``writes`` log, header first (after
    a line's checksum and, but for the header, the checksum it chains to)."""
    return [json.loads(line[line.index("{") :]) for line in path.read_text().splitlines()]


def stored_records(root: Path, channel: str, thread: str = "t") -> dict[str, dict[str, Any]]:
    """Every value record of ``channel`` the thread's ``checkpoints`` lines hold (deleted
    checkpoints' lines too), by version."""
    lines = log_lines(root / "threads" / thread / "~" / "checkpoints")[1:]
    return {r["version"]: r for line in lines for r in line["stored"] if r["channel"] == channel}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def saver(root: Path) -> Iterator[FileCheckpointer]:
    with FileCheckpointer(root) as opened:
        yield opened


# -- URLs and options -------------------------------------------------------------------


def test_absolute_and_relative_urls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with open_checkpointer(f"file://{tmp_path}/abs") as saver:
        assert isinstance(saver, FileCheckpointer)
        assert saver.path == f"{tmp_path}/abs"
    monkeypatch.chdir(tmp_path)
    with open_checkpointer("file://./rel/dir?compress=false&fsync=false") as saver:
        assert Path(saver.path) == Path("rel/dir")
        assert saver.compress is False
        put(saver, "t", values={"a": 1})
    assert (tmp_path / "rel/dir/statekeeper.json").is_file()
    with open_checkpointer("file://./rel/dir", on_corrupt="fallback") as saver:
        assert saver.on_corrupt == "fallback"
        assert saver.get_tuple(cfg("t")) is not None


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("file://host/dir", "file URLs have no host"),
        ("file://../dir", "file URLs have no host"),
        ("file://", "names no directory"),
        ("file:///", "names no directory"),
        ("file:relative/dir", "not a storage URL"),
        ("file:///x?nope=1", "unknown file option 'nope'"),
        ("file:///x?on_corrupt=ignore", "on_corrupt must be one of raise, fallback"),
        ("file:///x?lock_timeout=-1", "lock_timeout must be >= 0"),
        ("file:///x?fsync=sometimes", "fsync must be true or false"),
    ],
)
def test_bad_urls_raise_configuration_errors(
    url: str, expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigurationError, match=re.escape(expected)):
        open_checkpointer(url.replace("///x", f"//{tmp_path}/x"))
    assert not list(tmp_path.iterdir()), "a rejected URL must not create files"


def test_a_non_empty_foreign_directory_is_refused_and_left_alone(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ConfigurationError, match="not a statekeeper file store"):
        FileCheckpointer(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_a_newer_format_is_refused(root: Path) -> None:
    FileCheckpointer(root).close()
    (root / "statekeeper.json").write_text('{"format": "statekeeper-file", "version": 99}')
    with pytest.raises(SchemaVersionError, match="version 99"):
        FileCheckpointer(root)


def test_a_format_1_directory_is_refused_with_how_to_move_its_data(root: Path) -> None:
    FileCheckpointer(root).close()
    marker = root / "statekeeper.json"
    marker.write_text('{"format": "statekeeper-file", "version": 1}')
    with pytest.raises(SchemaVersionError, match=r"version 1, which .* no longer reads.*new"):
        FileCheckpointer(root)
    assert marker.read_text() == '{"format": "statekeeper-file", "version": 1}'  # untouched


def test_corrupt_checkpoint_error_is_a_storage_error_and_pickles() -> None:
    damage = Damage("altered", backend="file", path="/p", thread_id="t", checkpoint_id="c")
    error = CorruptCheckpointError("bad", damage)
    copy = pickle.loads(pickle.dumps(error))
    assert isinstance(copy, StorageError)
    assert copy.damage == damage
    assert (str(copy), copy.path, copy.thread_id, copy.checkpoint_id) == ("bad", "/p", "t", "c")
    assert (copy.backend, copy.reason, copy.checkpoint_ns) == ("file", "altered", None)


# -- layout -----------------------------------------------------------------------------


def test_layout_is_a_folder_per_thread_with_readable_json(saver: Any, root: Path) -> None:
    versions: dict[str, str] = {}
    first = put_step(saver, cfg("Thread-1"), versions, 3, metadata={"note": "héllo"})
    second = put_step(saver, first, versions, 4)  # blob is not new: not written again

    ns_dir = root / "threads" / "^thread-1" / "~"
    assert sorted(p.name for p in ns_dir.iterdir()) == [
        "checkpoints",
        "checkpoints.head",
        "values",
        "writes",
        "writes.head",
    ]
    assert sorted(p.name for p in ns_dir.parent.iterdir()) == ["@namespaces", "~"]
    records = log_lines(ns_dir / "checkpoints")
    assert records[0]["thread_id"] == "Thread-1"
    assert (records[0]["version"], records[0]["generation"]) == (3, 1)
    assert [r["checkpoint_id"] for r in records[1:]] == [cp_id(first), cp_id(second)]
    assert records[1]["metadata"] == {"note": "héllo", "step": 3}
    assert records[2]["parent_checkpoint_id"] == cp_id(first)
    # log twice, blob once: each (channel, version) stored once, by the put that made it
    assert [[r["channel"] for r in line["stored"]] for line in records[1:]] == [
        ["log", "blob"],
        ["log"],
    ]
    assert records[2]["values"] == {"log": cp_id(second), "blob": cp_id(first)}
    assert "data" in records[1]["stored"][0]  # small: inline, base64
    blob = records[1]["stored"][1]
    assert [p.name for p in (ns_dir / "values").iterdir()] == [blob["file"]]  # large: a file
    value_file = (ns_dir / "values" / blob["file"]).read_bytes()
    assert value_file.startswith(b"statekeeper-record 1 ")
    assert json.loads(value_file.split(b"\n")[1])["kind"] == "value"
    writes = log_lines(ns_dir / "writes")
    assert writes[0]["format"] == "statekeeper-writes"
    assert [(w["checkpoint_id"], w["task_id"]) for w in writes[1:]] == [
        (cp_id(first), "task-3"),
        (cp_id(second), "task-4"),
    ]


def test_stray_files_in_the_directory_are_ignored(saver: Any, root: Path) -> None:
    put(saver, "t")
    (root / "threads" / ".DS_Store").write_text("x")
    (root / "threads" / "README").mkdir()
    (root / "threads" / "t" / "Notes.TXT").write_text("x")
    assert [t.config["configurable"]["thread_id"] for t in saver.list(None)] == ["t"]
    assert saver.verify() == []


# -- file names -------------------------------------------------------------------------

_SAFE = re.compile(r"[a-z0-9._~^-]+")
_WINDOWS_RESERVED = re.compile(r"(con|prn|aux|nul|com\d|lpt\d)", re.IGNORECASE)


def assert_safe(name: str) -> None:
    assert _SAFE.fullmatch(name), name
    assert name not in (".", "..")
    assert not name.startswith(".")
    assert not name.endswith(".")
    assert not _WINDOWS_RESERVED.fullmatch(name.split(".", 1)[0]), name
    assert len(name.encode()) <= NAME_LIMIT


# long enough that many encodings pass NAME_LIMIT and get shortened
ids = st.text(max_size=20) | st.text(min_size=30, max_size=400)


@given(ids)
def test_names_are_reversible_safe_and_short(text: str) -> None:
    assert decode_name(encode_name(text)) == text
    name = file_name(text)
    assert_safe(name)
    if not is_hashed(name):
        assert decode_name(name) == text


@given(ids, ids)
def test_distinct_ids_never_share_a_name_even_ignoring_case(a: str, b: str) -> None:
    if a != b:
        assert file_name(a).lower() != file_name(b).lower()
        assert file_name(a + "x").lower() != file_name(a + "X").lower()


HOSTILE = [
    "",
    ".",
    "..",
    "../../etc/passwd",
    "/",
    "a/b",
    "a\\b",
    "\\\\server\\share",
    "\x00",
    "a\x00b",
    "CON",
    "con",
    "Con.txt",
    "nul",
    "NUL.tar.gz",
    "COM1",
    "lpt9",
    "aux.",
    "trailing.",
    ".hidden",
    "trailing ",
    "ABC",
    "abc",
    "aBc",
    "é",
    "e\u0301",
    "İ",
    "i̇",
    "ß",
    "SS",
    "🎉",
    "~7e",
    "~",
    "^a",
    "x" * 300,
    "x" * 299 + "y",
    "é" * 200,
    "x" * 10_000,
]


def test_hostile_ids_get_distinct_safe_names() -> None:
    names = [file_name(text) for text in HOSTILE]
    for name in names:
        assert_safe(name)
    assert len({name.lower() for name in names}) == len(HOSTILE)
    assert file_name("..") == "~2e~2e"
    assert file_name("CON") == "^c^o^n"
    assert file_name("con") == "~63on"
    assert file_name("nul.tar.gz") == "~6eul.tar.gz"
    assert is_hashed(file_name("x" * 300))
    assert not is_hashed(file_name("x" * 100))


@pytest.mark.parametrize("name", ["A", "~41", ".x", "x.", "con", "~zz", "a~", "^1", "a~~b"])
def test_non_canonical_names_are_not_decoded(name: str) -> None:
    with pytest.raises(ValueError, match="encoded name"):
        decode_name(name)


def test_hostile_thread_ids_and_namespaces_stay_inside_the_directory(
    saver: Any, root: Path
) -> None:
    stored = {}
    for i, text in enumerate(HOSTILE):
        thread_id = text or "empty-namespace-owner"
        stored[(thread_id, text)] = put(saver, thread_id, ns=text, values={"i": i})

    for (thread_id, ns), config in stored.items():
        tup = saver.get_tuple(cfg(thread_id, ns))
        assert tup is not None
        assert tup.config == config
    listed = {
        (t.config["configurable"]["thread_id"], t.config["configurable"]["checkpoint_ns"])
        for t in saver.list(None)
    }
    assert listed == set(stored)
    for path in root.rglob("*"):
        assert path.resolve().is_relative_to(root.resolve())
        assert len(path.name.encode()) <= 255
    assert saver.verify() == []


# -- crash safety: real SIGKILLs ----------------------------------------------------------


def _writer_until_killed(root: Path, thread_id: str) -> Callable[[int], None]:
    """Puts (with writes) forever, reporting each acknowledged checkpoint id; every 7th
    put reuses an id taken earlier, so it lands mid-file and forces an atomic rewrite."""

    def work(out: int) -> None:
        saver = FileCheckpointer(root)
        latest = saver.get_tuple(cfg(thread_id))
        parent = latest.config if latest else cfg(thread_id)
        versions = dict(latest.checkpoint["channel_versions"]) if latest else {}
        step = int(latest.metadata["step"]) if latest else 0
        spare = new_id()
        while True:
            step += 1
            reuse = step % 7 == 0
            reused = spare if reuse else None
            parent = put_step(saver, parent, versions, step, checkpoint_id=reused, history=True)
            os.write(out, f"{cp_id(parent)}\n".encode())
            if reuse:
                spare = new_id()

    return work


def test_sigkill_at_random_moments_leaves_only_whole_checkpoints(root: Path) -> None:
    rng = random.Random(7)
    acknowledged: set[str] = set()
    for _trial in range(30):
        pid, out = fork(_writer_until_killed(root, "crashy"))
        acknowledged.update(read_lines(out, rng.randint(1, 6)))
        # not synchronisation: a spin of random length (up to about one put) makes the
        # kill land at an arbitrary point of the child's next write
        for _ in range(rng.randint(0, 200_000)):
            pass
        os.kill(pid, signal.SIGKILL)
        acknowledged.update(read_lines(out, 10**6))  # acks written before it died
        os.close(out)
        os.waitpid(pid, 0)

        with FileCheckpointer(root) as saver:
            listed = list(saver.list(cfg("crashy")))
            ids = [t.checkpoint["id"] for t in listed]
            assert acknowledged <= set(ids), "an acknowledged checkpoint was lost"
            assert ids == sorted(ids, reverse=True)
            for tup in listed:
                check_loaded(tup)
                step = tup.metadata["step"]
                assert writes_of(tup) in ([], [(f"task-{step}", "log", f"w{step}")])
            latest = saver.get_tuple(cfg("crashy"))
            assert latest is not None
            assert latest.checkpoint["id"] == ids[0]
            assert saver.verify() == []
    assert len(acknowledged) >= 30


# -- integrity --------------------------------------------------------------------------


def _flip_byte(path: Path, at: int = -5) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


def _history(saver: Any, steps: int = 6) -> list[dict]:
    versions: dict[str, str] = {}
    configs = [put_step(saver, cfg("t"), versions, 1)]
    for step in range(2, steps + 1):
        configs.append(put_step(saver, configs[-1], versions, step))
    return configs


def _value_file(root: Path, config: dict, channel: str, saver: Any) -> Path:
    """The file of a large value (a ``blob``) that ``config``'s checkpoint uses."""
    tup = saver.get_tuple(config)
    version = tup.checkpoint["channel_versions"][channel]
    return root / "threads" / "t" / "~" / "values" / value_file_name(channel, version)


def _writes_line(root: Path, config: dict) -> int:
    """The offset of the first byte of the line of the writes log of ``config``'s task."""
    data = (root / "threads" / "t" / "~" / "writes").read_bytes()
    return data.index(
        json.dumps({"checkpoint_id": cp_id(config)}, separators=(",", ":")).encode()[:-1]
    )


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "delete"])
def test_a_damaged_value_file_raises_naming_thread_checkpoint_and_file(
    saver: Any, root: Path, damage: str
) -> None:
    configs = _history(saver)  # blobs at steps 3 and 6
    path = _value_file(root, configs[-1], "blob", saver)
    if damage == "flip":
        _flip_byte(path)
    elif damage == "truncate":
        path.write_bytes(path.read_bytes()[:-10])
    elif damage == "empty":
        path.write_bytes(b"")
    else:
        path.unlink()

    with pytest.raises(CorruptCheckpointError) as info:
        saver.get_tuple(cfg("t"))
    error = info.value
    assert (error.thread_id, error.checkpoint_ns, error.checkpoint_id) == (
        "t",
        "",
        cp_id(configs[-1]),
    )
    assert error.path == str(path)
    assert str(path) in str(error)
    assert "verify(quarantine=True)" in str(error)
    with pytest.raises(CorruptCheckpointError):
        list(saver.list(cfg("t")))
    check_loaded(saver.get_tuple(configs[-2]))  # others are unaffected


def test_a_damaged_writes_line_raises_and_is_never_overwritten(saver: Any, root: Path) -> None:
    configs = _history(saver, 5)
    path = root / "threads" / "t" / "~" / "writes"
    _flip_byte(path, _writes_line(root, configs[2]) + 70)
    damaged = path.read_bytes()

    with pytest.raises(CorruptCheckpointError, match="checksum mismatch") as info:
        saver.get_tuple(configs[2])
    assert (info.value.path, info.value.checkpoint_id) == (str(path), cp_id(configs[2]))
    with pytest.raises(CorruptCheckpointError):
        saver.put_writes(configs[2], [("log", "more")], "task-new")
    assert path.read_bytes() == damaged
    # the id a damaged line shows cannot be trusted: it may be a line of either neighbour
    for config in (configs[1], configs[3]):
        with pytest.raises(CorruptCheckpointError, match="checksum mismatch"):
            saver.get_tuple(config)
    for config in (configs[0], configs[4]):  # the other checkpoints' writes still read
        check_loaded(saver.get_tuple(config))
        step = saver.get_tuple(config).metadata["step"]
        assert writes_of(saver.get_tuple(config)) == [(f"task-{step}", "log", f"w{step}")]


def test_fallback_returns_the_newest_intact_checkpoint_with_a_warning(
    root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with FileCheckpointer(root) as strict:
        configs = _history(strict)
    checkpoints = root / "threads" / "t" / "~" / "checkpoints"
    _flip_byte(checkpoints, -30)  # inside the newest checkpoint's line

    with FileCheckpointer(root) as strict, pytest.raises(CorruptCheckpointError):
        strict.get_tuple(cfg("t"))
    with FileCheckpointer(root, on_corrupt="fallback") as lenient:
        with caplog.at_level(logging.WARNING, logger="statekeeper.backends.file.checkpointer"):
            latest = lenient.get_tuple(cfg("t"))
        assert latest is not None
        assert latest.config == configs[-2]
        assert "damaged" in caplog.text
        assert [t.config for t in lenient.list(cfg("t"))] == configs[-2::-1]
        # the writer goes on from the intact checkpoint; the damaged line is kept
        after = put_step(lenient, latest.config, dict(latest.checkpoint["channel_versions"]), 9)
        assert lenient.get_tuple(cfg("t")).config == after  # type: ignore[union-attr]
    assert len(checkpoints.read_text().splitlines()) == 1 + len(configs) + 1


def test_fallback_skips_a_checkpoint_whose_value_is_damaged_but_not_one_asked_for(
    root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with FileCheckpointer(root, on_corrupt="fallback") as saver:
        configs = _history(saver, 3)  # step 3 has the only blob
        _flip_byte(_value_file(root, configs[-1], "blob", saver))
        with caplog.at_level(logging.WARNING, logger="statekeeper.backends.file.checkpointer"):
            assert saver.get_tuple(cfg("t")).config == configs[-2]  # type: ignore[union-attr]
        assert cp_id(configs[-1]) in caplog.text
        with pytest.raises(CorruptCheckpointError):
            saver.get_tuple(configs[-1])


def test_verify_lists_damage_and_quarantine_moves_it_aside(saver: Any, root: Path) -> None:
    configs = _history(saver, 6)  # blobs at steps 3 and 6
    blob = _value_file(root, configs[2], "blob", saver)  # used by steps 3, 4 and 5
    writes = root / "threads" / "t" / "~" / "writes"
    _flip_byte(blob)
    _flip_byte(writes, _writes_line(root, configs[0]) + 70)
    damaged = {blob.name: blob.read_bytes(), writes.name: writes.read_bytes()}
    assert saver.verify() == saver.verify()  # verify alone changes nothing

    found = saver.verify()
    by_path = {(str(f.path), f.checkpoint_id): f.reason for f in found}
    checkpoints = root / "threads" / "t" / "~" / "checkpoints"
    assert "checksum mismatch" in by_path[(str(blob), None)]
    assert "checksum mismatch" in by_path[(str(writes), cp_id(configs[0]))]
    # steps 1 and 2 (writes: the damaged line may be either's) and 3-5 (the blob)
    for i in (0, 1, 2, 3, 4):
        assert (str(checkpoints), cp_id(configs[i])) in by_path
    assert len(found) == 7

    assert saver.verify(quarantine=True) == found
    assert saver.verify() == []
    assert [t.config for t in saver.list(cfg("t"))] == [configs[5]]
    for tup in saver.list(cfg("t")):
        check_loaded(tup)
    kept = {p.name: p.read_bytes() for p in all_files(root / "quarantine")}
    assert kept[blob.name] == damaged[blob.name]
    assert kept[writes.name] == damaged[writes.name]
    assert len(kept["checkpoints"].splitlines()) == 7  # the old file, whole


def _rewrite_line(path: Path, at: int, change: Callable[[dict[str, Any]], None]) -> None:
    """Change the JSON of the line starting at ``at``, and write the log again with its
    checksums, chain and head to match (docs/file-backend.md), as a bug in a writer could:
    damage that no checksum catches, only what a reader checks of the JSON itself."""
    from statekeeper.backends.file._log.lines import Entry
    from statekeeper.backends.file._log.write import rewrite

    lines = path.read_bytes().split(b"\n")[:-1]
    header = json.loads(lines[0][lines[0].index(b"{") :])
    entries, offset = [], len(lines[0]) + 1
    for line in lines[1:]:
        record = json.loads(line[line.index(b"{") :])
        if offset == at:
            change(record)
        raw = json.dumps(record, separators=(",", ":")).encode()
        entries.append(Entry(record["checkpoint_id"], None, None, record, raw))
        offset += len(line) + 1
    rewrite(path, path.name, header["thread_id"], header["checkpoint_ns"], entries, durable=False)


def test_verify_reports_a_malformed_writes_line_once_and_quarantine_drops_it(
    saver: Any, root: Path
) -> None:
    configs = _history(saver, 3)
    writes = root / "threads" / "t" / "~" / "writes"
    checkpoints = root / "threads" / "t" / "~" / "checkpoints"

    def bad_base64(record: dict[str, Any]) -> None:
        record["writes"][0][4] = "not base64!"

    start = writes.read_bytes().rindex(b"\n", 0, _writes_line(root, configs[1])) + 1
    _rewrite_line(writes, start, bad_base64)
    with pytest.raises(CorruptCheckpointError, match="malformed writes line"):
        saver.get_tuple(configs[1])

    found = saver.verify()
    assert [(Path(f.path), f.checkpoint_id) for f in found] == [
        (writes, cp_id(configs[1])),  # once: the line's checksum matches
        (checkpoints, cp_id(configs[1])),
    ]
    assert "malformed writes line" in found[0].reason
    assert f"its writes in {writes.name} are damaged" in found[1].reason
    assert saver.verify(quarantine=True) == found
    assert saver.verify() == []
    assert [t.config for t in saver.list(cfg("t"))] == [configs[2], configs[0]]
    for tup in saver.list(cfg("t")):
        check_loaded(tup)
    assert writes_of(saver.get_tuple(configs[2])) == [("task-3", "log", "w3")]
    assert len(list((root / "quarantine").rglob("writes"))) == 1  # the old log, whole


def test_a_damaged_line_in_the_middle_is_named_skipped_or_quarantined(
    root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with FileCheckpointer(root) as saver:
        configs = _history(saver, 5)
    checkpoints = root / "threads" / "t" / "~" / "checkpoints"
    lines = checkpoints.read_bytes().split(b"\n")
    # the second checkpoint's line: no later checkpoint uses a value stored in it
    lines[2] = lines[2].replace(b'"step":2', b'"step":3')
    checkpoints.write_bytes(b"\n".join(lines))

    with FileCheckpointer(root) as strict:
        assert strict.get_tuple(cfg("t")).config == configs[-1]  # type: ignore[union-attr]
        with pytest.raises(CorruptCheckpointError, match=cp_id(configs[1])):
            list(strict.list(cfg("t")))
    with FileCheckpointer(root, on_corrupt="fallback") as lenient:
        with caplog.at_level(logging.WARNING, logger="statekeeper.backends.file.checkpointer"):
            listed = [t.config for t in lenient.list(cfg("t"))]
        assert listed == [configs[4], configs[3], configs[2], configs[0]]
        assert "checksum mismatch" in caplog.text
        found = lenient.verify(quarantine=True)
        assert [(Path(f.path), f.checkpoint_id) for f in found] == [
            (checkpoints, cp_id(configs[1]))
        ]
        assert cp_id(configs[1]) in found[0].reason
        assert lenient.verify() == []
    with FileCheckpointer(root) as strict:
        assert [t.config for t in strict.list(cfg("t"))] == listed


def test_a_torn_last_line_is_ignored_and_cut_off_by_the_next_writer(saver: Any, root: Path) -> None:
    configs = _history(saver, 2)
    checkpoints = root / "threads" / "t" / "~" / "checkpoints"
    intact = checkpoints.read_bytes()
    checkpoints.write_bytes(intact + b'0123456789abcdef {"checkpoint_id":"torn')

    assert saver.get_tuple(cfg("t")).config == configs[-1]  # type: ignore[union-attr]
    assert saver.verify() == []
    latest = saver.get_tuple(cfg("t"))
    after = put_step(saver, configs[-1], dict(latest.checkpoint["channel_versions"]), 3)
    assert checkpoints.read_bytes().startswith(intact)
    assert b"torn" not in checkpoints.read_bytes()
    assert [t.config for t in saver.list(cfg("t"))] == [after, *configs[::-1]]


# -- flushes ----------------------------------------------------------------------------


def test_a_put_and_a_put_writes_flush_once_each(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flushed: list[str] = []
    for name in ("fsync", "fdatasync"):
        real = getattr(os, name)

        def counting(fd: int, real: Callable[[int], None] = real, name: str = name) -> None:
            flushed.append(name)
            real(fd)

        monkeypatch.setattr(os, name, counting)
    with FileCheckpointer(root) as saver:
        versions: dict[str, str] = {}
        first = put_step(saver, cfg("t"), versions, 1, history=True)  # creates the folders
        flushed.clear()
        second = put_step(saver, first, versions, 2, history=True)
        assert flushed == ["fdatasync", "fdatasync"]  # the checkpoint's line, the writes'
        flushed.clear()
        put_step(saver, second, versions, 3)  # a large blob: its file, values/, the lines
        assert sorted(flushed) == ["fdatasync", "fdatasync", "fdatasync", "fsync"]


def test_a_late_write_for_an_older_checkpoint_keeps_the_writes_log_sorted(
    saver: Any, root: Path
) -> None:
    configs = _history(saver, 3)
    saver.put_writes(configs[0], [("log", "late")], "task-late")
    saver.put_writes(configs[0], [("log", "again")], "task-late")  # (task, 0) is stored
    ids = [line["checkpoint_id"] for line in log_lines(root / "threads/t/~/writes")[1:]]
    assert ids == sorted(ids)
    assert writes_of(saver.get_tuple(configs[0])) == [
        ("task-1", "log", "w1"),
        ("task-late", "log", "late"),
    ]
    assert writes_of(saver.get_tuple(configs[2])) == [("task-3", "log", "w3")]
    assert saver.verify() == []


def test_storing_a_checkpoint_again_keeps_the_values_others_use(saver: Any, root: Path) -> None:
    configs = _history(saver, 4)  # step 3's blob is used by step 4
    tup = saver.get_tuple(configs[2])
    again = {**tup.checkpoint, "channel_values": {}}
    saver.put(cfg("t"), again, {"step": 3, "again": True}, {})  # stores no value
    assert saver.get_tuple(configs[2]).metadata["again"] is True  # type: ignore[union-attr]
    check_loaded(saver.get_tuple(configs[3]))
    assert saver.verify() == []


# -- append deltas ------------------------------------------------------------------------


def _growing(saver: Any, steps: int) -> list[dict]:
    versions: dict[str, str] = {}
    configs = [put_step(saver, cfg("t"), versions, 1, history=True)]
    for step in range(2, steps + 1):
        configs.append(put_step(saver, configs[-1], versions, step, history=True))
    return configs


def test_a_growing_list_is_stored_as_append_deltas_and_read_back_exactly(
    saver: Any, root: Path
) -> None:
    configs = _growing(saver, 20)

    files = stored_records(root, "history")
    assert len(files) == 20
    assert sum("base" in meta for meta in files.values()) == 19  # skip-deltas on one copy
    for config in configs:
        check_loaded(saver.get_tuple(config))
    with FileCheckpointer(root) as fresh:  # remembers nothing: follows every chain
        for tup in fresh.list(cfg("t")):
            check_loaded(tup)


def test_a_damaged_base_is_reported_for_every_checkpoint_built_on_it(root: Path) -> None:
    with FileCheckpointer(root) as saver:
        configs = _growing(saver, 6)
    checkpoints = root / "threads" / "t" / "~" / "checkpoints"
    lines = checkpoints.read_bytes().split(b"\n")
    # the line of the 5th checkpoint, whose value the 6th builds on (and no other)
    lines[5] = lines[5].replace(b'"step":5', b'"step":6')
    checkpoints.write_bytes(b"\n".join(lines))

    with FileCheckpointer(root) as saver:
        with pytest.raises(CorruptCheckpointError) as info:
            saver.get_tuple(cfg("t"))
        assert info.value.path == str(checkpoints)
        found = saver.verify()
        dependents = {f.checkpoint_id for f in found if Path(f.path).name == "checkpoints"}
        assert dependents == {cp_id(c) for c in configs[4:]}
        assert sum("delta chain" in f.reason for f in found) == 1
        saver.verify(quarantine=True)
        assert saver.verify() == []
        assert [t.config for t in saver.list(cfg("t"))] == configs[3::-1]


def test_prune_keeps_the_bases_a_surviving_delta_needs(saver: Any, root: Path) -> None:
    configs = _growing(saver, 8)
    saver.prune(["t"])

    assert [t.config for t in saver.list(cfg("t"))] == [configs[-1]]
    # the newest, and the skip chain under it (the 8th value: on the 7th, 6th, 5th, 1st)
    assert len(stored_records(root, "history")) == 5
    with FileCheckpointer(root) as fresh:
        check_loaded(fresh.get_tuple(cfg("t")))


def test_a_delta_whose_base_was_deleted_meanwhile_is_stored_whole(root: Path) -> None:
    with FileCheckpointer(root) as writer, FileCheckpointer(root) as other:
        versions: dict[str, str] = {}
        first = put_step(writer, cfg("t"), versions, 1, history=True)
        put_step(writer, first, versions, 2, history=True)
        other.delete_thread("t")  # the base the writer remembers is gone
        third = put_step(writer, cfg("t"), versions, 3, history=True)

    assert [("base" in meta) for meta in stored_records(root, "history").values()] == [False]
    with FileCheckpointer(root) as fresh:
        check_loaded(fresh.get_tuple(third))


def test_overwriting_a_base_version_keeps_the_deltas_built_on_it(saver: Any, root: Path) -> None:
    versions: dict[str, str] = {}
    first = put_step(saver, cfg("t"), versions, 1, history=True)
    second = put_step(saver, first, versions, 2, history=True)  # a delta on first's
    tup = saver.get_tuple(first)
    checkpoint = {**tup.checkpoint, "channel_values": {"history": ["rewritten"]}}
    version = tup.checkpoint["channel_versions"]["history"]
    saver.put(cfg("t"), checkpoint, {"step": 1}, {"history": version})

    with FileCheckpointer(root) as fresh:
        check_loaded(fresh.get_tuple(second))
        rewritten = fresh.get_tuple(first)
        assert rewritten.checkpoint["channel_values"]["history"] == ["rewritten"]
    assert not any("base" in meta for meta in stored_records(root, "history").values())


# -- several processes --------------------------------------------------------------------


def test_four_processes_write_one_directory_while_this_one_reads(root: Path) -> None:
    FileCheckpointer(root).close()
    steps = 15
    go_read, go_write = os.pipe()

    def worker(thread_id: str) -> Callable[[int], None]:
        def work(out: int) -> None:
            os.read(go_read, 1)  # start together
            saver = FileCheckpointer(root)
            parent, versions = cfg(thread_id), {}
            for step in range(1, steps + 1):
                metadata = {"pid": os.getpid()}
                parent = put_step(saver, parent, versions, step, metadata=metadata, history=True)
            os.write(out, b"done\n")

        return work

    threads = ["shared", "shared", "own-1", "own-2"]
    children = [fork(worker(thread_id)) for thread_id in threads]
    os.write(go_write, b"x" * len(children))
    running = {pid for pid, _ in children}
    reads = 0
    with FileCheckpointer(root) as reader:
        while running:  # read while they write: every checkpoint seen is whole
            for tup in reader.list(None, limit=20):
                check_loaded(tup)
            reads += 1
            for pid in list(running):
                if os.waitpid(pid, os.WNOHANG) != (0, 0):
                    running.discard(pid)
        assert [read_lines(out, 1) for _, out in children] == [["done"]] * 4
        counts = {t: len(list(reader.list(cfg(t)))) for t in set(threads)}
        assert counts == {"shared": 2 * steps, "own-1": steps, "own-2": steps}
        shared = list(reader.list(cfg("shared")))
        assert len({t.metadata["pid"] for t in shared}) == 2
        for tup in reader.list(None):
            check_loaded(tup)
        assert reader.verify() == []
    assert reads > 0


def test_a_writer_waits_for_another_process_lock_then_times_out(root: Path) -> None:
    release_read, release_write = os.pipe()

    def hold_lock(out: int) -> None:
        with FileCheckpointer(root) as holder, holder._store.lock("busy"):
            os.write(out, b"locked\n")
            os.read(release_read, 1)

    FileCheckpointer(root).close()
    pid, out = fork(hold_lock)
    assert read_lines(out, 1) == ["locked"]
    with FileCheckpointer(root, lock_timeout=0.2) as saver:
        with pytest.raises(StorageError, match=r"another process was holding it.*lock_timeout"):
            put(saver, "busy")
        assert saver.get_tuple(cfg("busy")) is None  # readers never wait
        put(saver, "free")  # other threads are not blocked
        os.write(release_write, b"x")
        os.waitpid(pid, 0)
        put(saver, "busy")
    os.close(out)


# -- maintenance ---------------------------------------------------------------------------


def test_copy_thread_shares_immutable_files_and_stays_independent(saver: Any, root: Path) -> None:
    configs = _history(saver, 3)
    saver.copy_thread("t", "copy")
    source = root / "threads" / "t" / "~" / "values"
    target = root / "threads" / "copy" / "~" / "values"
    for path in source.iterdir():
        assert (target / path.name).stat().st_ino == path.stat().st_ino  # hard links

    saver.delete_thread("t")
    assert not (root / "threads" / "t").exists()
    assert list((root / "trash").iterdir()) == []
    copied = list(saver.list(cfg("copy")))
    assert [cp_id(t.config) for t in copied] == [cp_id(c) for c in configs[::-1]]
    for tup in copied:
        check_loaded(tup)


def test_prune_and_delete_for_runs_remove_unused_values(saver: Any, root: Path) -> None:
    versions: dict[str, str] = {}
    first = put_step(saver, cfg("t"), versions, 3, metadata={"run_id": "r1"})
    second = put_step(saver, first, versions, 4, metadata={"run_id": "r2"})
    values = root / "threads" / "t" / "~" / "values"

    def stored() -> int:
        return len(stored_records(root, "log")) + len(stored_records(root, "blob"))

    assert stored() == 3

    saver.delete_for_runs(["r2"])
    assert [t.config for t in saver.list(cfg("t"))] == [first]
    assert stored() == 2  # the second log version is gone
    second = put_step(saver, first, versions, 5)
    saver.prune(["t"])
    assert [t.config for t in saver.list(cfg("t"))] == [second]
    assert stored() == 2  # log@5 and the blob it still uses (its line is kept for it)
    assert len(list(values.iterdir())) == 1
    check_loaded(saver.get_tuple(cfg("t")))
    third = put_step(saver, second, versions, 6)  # a new blob: the old one is unused
    saver.prune(["t"])
    assert [t.config for t in saver.list(cfg("t"))] == [third]
    assert stored() == 2
    assert [p.name for p in values.iterdir()] == [_value_file(root, third, "blob", saver).name]
    assert len(log_lines(root / "threads" / "t" / "~" / "checkpoints")) == 2


def test_fsync_false_still_writes_atomically(root: Path) -> None:
    with FileCheckpointer(root, fsync=False) as saver:
        configs = _history(saver, 3)
        assert [t.config for t in saver.list(cfg("t"))] == configs[::-1]
        assert saver.verify() == []


# -- review regressions ----------------------------------------------------------------------


def test_copy_thread_never_replaces_a_target_whose_checkpoints_are_damaged(root: Path) -> None:
    with FileCheckpointer(root) as saver:
        put_step(saver, cfg("target"), {}, 1)
        put_step(saver, cfg("source"), {}, 1)
    checkpoints = root / "threads" / "target" / "~" / "checkpoints"
    _flip_byte(checkpoints, -30)  # the target's only checkpoint line
    damaged = checkpoints.read_bytes()

    with (
        FileCheckpointer(root, on_corrupt="fallback") as lenient,
        pytest.raises(ThreadExistsError),
    ):
        lenient.copy_thread("source", "target")
    assert checkpoints.read_bytes() == damaged  # never replaced, never deleted


def test_a_shortened_folder_whose_header_names_another_thread_is_damage(root: Path) -> None:
    first, second = "A" * 300, "B" * 300  # both get shortened (hashed) folder names
    with FileCheckpointer(root) as saver:
        put_step(saver, cfg(first), {}, 1)
        put_step(saver, cfg(second), {}, 1)
        folder = root / "threads" / file_name(second) / "~"
        for path in folder.rglob("*"):
            if path.is_file():
                path.unlink()
        for path in (root / "threads" / file_name(first) / "~").rglob("*"):
            if path.is_file():  # the other thread's files, misplaced into this folder
                relative = path.relative_to(root / "threads" / file_name(first) / "~")
                (folder / relative).write_bytes(path.read_bytes())

        with pytest.raises(CorruptCheckpointError, match="names another thread"):
            saver.get_tuple(cfg(second))  # never the other thread's checkpoint
        found = saver.verify()
        assert [(Path(f.path), "names another thread" in f.reason) for f in found] == [
            (folder / "checkpoints", True)
        ]
        assert saver.verify(quarantine=True) == found
        assert saver.verify() == []
        assert saver.get_tuple(cfg(second)) is None
        assert len(list(saver.list(None))) == 1


def test_a_new_directory_is_durable_before_it_is_used(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from statekeeper.backends.file import _directory

    synced: list[tuple[Path, bool]] = []
    real = _directory.sync_dir

    def record(path: Path) -> None:
        synced.append((path, (root / "threads").is_dir()))
        real(path)

    monkeypatch.setattr(_directory, "sync_dir", record)
    FileCheckpointer(root).close()
    assert (root, True) in synced  # threads/ (and the rest) exist in a flushed root


def test_quarantine_flushes_its_copy_before_rewriting_the_checkpoints_file(
    saver: Any, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from statekeeper.backends.file import _verify as _file_verify
    from statekeeper.backends.file._log import write as _file_index

    configs = _history(saver, 3)
    _flip_byte(_value_file(root, configs[-1], "blob", saver))
    synced: list[Path] = []
    monkeypatch.setattr(_file_verify, "sync_dir", synced.append)
    rewrite = _file_index.rewrite

    def checked_rewrite(path: Path, *args: Any, **kwargs: Any) -> None:
        copy = next((root / "quarantine").rglob("checkpoints"))
        assert copy.parent in synced, "the kept copy must be durable before the rewrite"
        rewrite(path, *args, **kwargs)

    monkeypatch.setattr(_file_index, "rewrite", checked_rewrite)
    assert len(saver.verify(quarantine=True)) == 2
    moved = next((root / "quarantine").rglob("blob@*"))
    assert moved.parent in synced  # a moved file is flushed where it lands too
    assert saver.verify() == []


def test_a_copy_that_fails_to_publish_puts_the_target_back(
    saver: Any, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    configs = _history(saver, 2)
    target = cfg("target", checkpoint_id=cp_id(configs[0]))
    saver.put_writes(target, [("log", "early")], "task")  # pending writes, no checkpoint
    before = {p.relative_to(root): p.read_bytes() for p in all_files(root / "threads" / "target")}
    rename = Path.rename

    def failing(self: Path, to: Any) -> Any:
        if self.name.startswith("copy-"):
            raise OSError(28, "No space left on device")
        return rename(self, to)

    monkeypatch.setattr(Path, "rename", failing)
    with pytest.raises(StorageError, match="No space left"):
        saver.copy_thread("t", "target")
    after = {p.relative_to(root): p.read_bytes() for p in all_files(root / "threads" / "target")}
    assert after == before


def test_cleanup_never_deletes_a_damaged_or_unrecognised_value_file(saver: Any, root: Path) -> None:
    versions: dict[str, str] = {}
    first = put_step(saver, cfg("t"), versions, 3, metadata={"run_id": "r1"})
    second = put_step(saver, first, versions, 6, metadata={"run_id": "r2"})
    values = root / "threads" / "t" / "~" / "values"
    damaged = _value_file(root, second, "blob", saver)  # only the doomed checkpoint uses it
    _flip_byte(damaged)  # in the payload: its JSON line still reads
    kept = damaged.read_bytes()
    stray = values / "notes"  # not a value file name, though its second line is JSON
    stray.write_text('my notes\n{"base": null}\n')
    misnamed = values / "other@1"  # a value file name holding another file's record
    misnamed.write_bytes((values / _value_file(root, first, "blob", saver).name).read_bytes())

    saver.delete_for_runs(["r2"])
    saver.prune(["t"])
    assert [t.config for t in saver.list(cfg("t"))] == [first]
    assert damaged.read_bytes() == kept  # left for verify() to report and quarantine
    assert stray.read_text() == 'my notes\n{"base": null}\n'
    assert misnamed.exists()
    assert {str(f.path) for f in saver.verify()} == {str(damaged), str(misnamed)}


def test_stray_files_in_values_and_writes_are_ignored_not_quarantined(
    saver: Any, root: Path
) -> None:
    _history(saver, 3)
    ns_dir = root / "threads" / "t" / "~"
    strays = [ns_dir / "values" / "README", ns_dir / "values" / "notes.txt"]
    strays += [ns_dir / "README", ns_dir / "Notes.TXT"]
    for path in strays:
        path.write_text("mine")
    assert saver.verify() == []
    assert saver.verify(quarantine=True) == []
    assert all(path.read_text() == "mine" for path in strays)
    assert all_files(root / "quarantine") == []


def test_verify_removes_copies_left_by_a_crash_but_never_one_in_progress(
    saver: Any, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from statekeeper.backends.file import _directory

    configs = _history(saver, 3)  # step 3 stores a blob: a file to link
    seen: list[list[str]] = []
    link = _directory._link

    def crash_after_first_link(store: Any, source: Path, target: Path) -> None:
        link(store, source, target)
        seen.append(sorted(p.name for p in (root / "trash").iterdir()))
        other = FileCheckpointer(root, lock_timeout=0.05)
        with pytest.raises(StorageError, match="lock"):
            other.verify()  # the copy holds the target's lock: its folder is left alone
        raise KeyboardInterrupt  # as if killed: nothing cleans up

    monkeypatch.setattr(_directory, "_link", crash_after_first_link)
    monkeypatch.setattr(_directory.shutil, "rmtree", lambda *a, **k: None)
    with pytest.raises(KeyboardInterrupt):
        saver.copy_thread("t", "copy")
    monkeypatch.undo()
    assert len(seen) == 1
    assert seen[0][0].startswith("copy-")
    assert [p.name for p in (root / "trash").iterdir()] == seen[0]  # the crash's leftover

    assert saver.verify() == []
    assert list((root / "trash").iterdir()) == []
    assert [t.config for t in saver.list(cfg("t"))] == configs[::-1]
    assert saver.get_tuple(cfg("copy")) is None


def test_a_lock_timeout_says_whether_a_thread_or_a_process_held_it(root: Path) -> None:
    import threading

    taken, release = threading.Event(), threading.Event()
    with FileCheckpointer(root, lock_timeout=0.1) as saver:

        def hold() -> None:
            with saver._store.lock("busy"):
                taken.set()
                release.wait()

        holder = threading.Thread(target=hold)
        holder.start()
        try:
            taken.wait()
            with pytest.raises(StorageError) as info:
                put(saver, "busy")
        finally:
            release.set()
            holder.join()
    message = str(info.value)
    assert "another thread of this process" in message
    assert "another process" not in message
    assert "lock_timeout" in message


def test_a_fork_while_another_thread_holds_a_lock_does_not_keep_it_held(root: Path) -> None:
    import threading

    taken, release = threading.Event(), threading.Event()
    child_go, child_release = os.pipe()
    with FileCheckpointer(root) as saver:

        def hold() -> None:
            with saver._store.lock("busy"):
                taken.set()
                release.wait()

        holder = threading.Thread(target=hold)
        holder.start()
        taken.wait()
        try:
            pid, out = fork(lambda out: os.read(child_go, 1) and None)  # lives on
        finally:
            release.set()
            holder.join()
        try:

            def take(out: int) -> None:
                with FileCheckpointer(root, lock_timeout=2) as other:
                    put(other, "busy")
                os.write(out, b"took it\n")

            other_pid, other_out = fork(take)
            assert read_lines(other_out, 1) == ["took it"]  # while the first child lives
            assert os.waitpid(pid, os.WNOHANG) == (0, 0)
            os.waitpid(other_pid, 0)
        finally:
            os.write(child_release, b"x")
            os.waitpid(pid, 0)
        for fd in (out, other_out, child_go, child_release):
            os.close(fd)


def test_a_task_s_writes_are_stored_while_a_checkpoint_is_but_not_during_a_delete(
    root: Path,
) -> None:
    import threading

    taken, release = threading.Event(), threading.Event()
    with FileCheckpointer(root, lock_timeout=0.2) as saver:
        config = put(saver, "t")

        def hold(lock: Callable[[str], Any]) -> None:
            with lock("t"):
                taken.set()
                release.wait()

        for lock, blocks in ((saver._store.checkpoints_lock, False), (saver._store.lock, True)):
            taken.clear()
            release.clear()
            holder = threading.Thread(target=hold, args=(lock,))
            holder.start()
            try:
                taken.wait()
                if blocks:  # deleting and copying hold the writes lock too
                    with pytest.raises(StorageError, match="@writes"):
                        saver.put_writes(config, [("log", "late")], "task-b")
                else:  # a put in progress does not delay the writes of a task
                    saver.put_writes(config, [("log", "early")], "task-a")
            finally:
                release.set()
                holder.join()
        assert writes_of(saver.get_tuple(config)) == [("task-a", "log", "early")]


def test_claims_live_beside_the_threads_and_verify_ignores_them(saver: Any, root: Path) -> None:
    put(saver, "claims")  # a thread named like the folder is still a thread
    with saver.claim_thread("claims"), saver.claim_thread("t"):
        assert len(list((root / "claims").iterdir())) == 2
        put(saver, "t")  # a claim is advisory: writes never wait for it
        assert saver.verify() == []
        assert sorted(t.config["configurable"]["thread_id"] for t in saver.list(None)) == [
            "claims",
            "t",
        ]
    assert list((root / "claims").iterdir()) == []
    assert sorted(p.name for p in (root / "threads").iterdir()) == ["claims", "t"]


@given(
    st.recursive(
        st.none()
        | st.booleans()
        | st.integers()
        | st.text()
        | st.floats(allow_nan=False, allow_infinity=False),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
        max_leaves=8,
    )
)
def test_lines_hold_canonical_json_whatever_the_value(value: Any) -> None:
    """Texts, ``None`` and integers are formatted without ``json.dumps``; every line must
    still hold the canonical JSON the format documents, the very text ``json.dumps``
    makes."""
    from statekeeper.backends.file._log.lines import dumps

    canonical = json.dumps(
        value, ensure_ascii=True, sort_keys=True, allow_nan=False, separators=(",", ":")
    )
    assert dumps(value) == canonical
