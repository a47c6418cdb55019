"""``FileCheckpointer``: every thread in plain files under one directory, standard library only.

The layout (``docs/file-backend.md``) is a folder per (thread, namespace) holding a
``checkpoints`` log — one line of readable JSON per checkpoint, sorted by id, with the
values of the versions it created (later checkpoints refer to them there) — a ``writes``
log, one line per ``put_writes``, a head beside each log saying how far its committed lines
reach, and a ``values/`` folder for values too large to inline, one checksummed file per
(channel, version); a manifest per thread lists its namespaces.

Guarantees:

* Crash safety: a checkpoint exists once its line is appended and flushed, after the
  files of its large values are durable; a ``put_writes`` once its line is. A torn last
  line (a crash during the append) is ignored. Every other change writes a temporary
  file, flushes it and renames it into place. A process killed at any instant leaves the
  old state or the new one.
* Integrity: every line, file, head and manifest carries a checksum, and each line names
  the line before it; a log shorter than its head, or lacking a line, is damage. A read
  returns exactly what was stored or raises :class:`CorruptCheckpointError` naming the
  thread, checkpoint, file and kind of record; ``on_corrupt="fallback"`` instead logs a
  warning and returns the newest intact checkpoint. :meth:`FileCheckpointer.verify` lists
  damage, can move it into ``quarantine/`` and can rebuild heads; nothing damaged is ever
  deleted.
* Read-only: ``mode="ro"``, or a directory that is not writable, creates and changes
  nothing; writes raise :class:`ReadOnlyError`.
* Concurrency: writers of one thread queue on that thread's ``fcntl.flock`` (POSIX only),
  in this process and others — ``put`` on one lock, ``put_writes`` on another, so a task's
  writes are stored while the next checkpoint is; readers take no lock and see only
  committed checkpoints.
* Cost: ``get_tuple`` (latest) and ``list(thread, limit=n)`` read the end of the
  ``checkpoints`` file and bisect the logs for values stored by earlier checkpoints and
  for pending writes, so they cost about the same for ten checkpoints or ten thousand.
  ``thread_heads`` and ``list(None, limit=n)`` read a page of the directory's index
  (``index/``, kept by every write) and check each entry against its thread's log, so
  they cost about the same for ten threads or ten thousand; an index that is missing,
  damaged or not yet rebuilt is never trusted (they read every thread instead). A ``put``
  and a ``put_writes`` flush to disk once each (a value over 64 KiB twice more); moving a
  head and the index's lines flush nothing.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import logging
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Self, Unpack

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple, DeltaChannelHistory
from langgraph.checkpoint.serde.base import SerializerProtocol

from statekeeper._storage.claims import LockFileClaims
from statekeeper._storage.deltas import ValuePlanner
from statekeeper._storage.payload import safe_serde
from statekeeper._storage.remembered import RecentPayloads
from statekeeper._storage.worker import BatchWorker, run_each
from statekeeper.backends.file import DirectoryOptions, directory_path, opening
from statekeeper.backends.file._directory import copy_thread, remove_thread
from statekeeper.backends.file._log.catalog import Catalog, Change
from statekeeper.backends.file._log.lines import Entry, make_entry
from statekeeper.backends.file._namespace import (
    Namespace,
    reporting,
    short,
)
from statekeeper.backends.file._prune import drop_runs, keep_latest
from statekeeper.backends.file._reads import (
    Reader,
    delta_history,
    listing,
    root_head,
    scan_threads,
    task_writes,
    thread_heads,
)
from statekeeper.backends.file._records import CLAIMS_DIR, Store
from statekeeper.backends.file._values import Memo, place_values, plan_values
from statekeeper.backends.file._verify import verify
from statekeeper.checkpointers.base import Checkpointer, TaskWrite
from statekeeper.checkpointers.heads import Head
from statekeeper.checkpointers.records import PreparedPut, PreparedWrites
from statekeeper.checkpointers.semantics import (
    ON_CORRUPT,
    before_id,
    check_choice,
    check_limit,
    list_scope,
    location,
)
from statekeeper.errors import (
    ConfigurationError,
    Damage,
    StorageError,
    ThreadExistsError,
)
from statekeeper.urls import OptionKind, StorageURL, check_option, parse_options

__all__ = ["ON_CORRUPT", "FileCheckpointer"]

log = logging.getLogger("statekeeper.backends.file.checkpointer")

Damages = list[Damage]  # named here: the class has a method called list
Heads = list[Head]

_OPTIONS: dict[str, OptionKind] = {
    "mode": str,
    "compress": bool,
    "on_corrupt": str,
    "lock_timeout": float,
    "fsync": bool,
    "serde": object,
}
TaskWrites = list[TaskWrite]


class FileCheckpointer(Checkpointer):
    """A LangGraph checkpointer keeping everything in plain files under ``path``.

    Args:
        path: the directory; created if missing (``mode="rw"``). An existing non-empty
            directory must already be a statekeeper file store (it holds
            ``statekeeper.json``); one written by an older statekeeper (format 2 or 3) is
            upgraded on a read-write open, without rewriting its history (its index is
            built then, reading every log once).
        serde: the serializer for every payload (default: :func:`safe_serde`).
        compress: zlib-compress payloads of 256 bytes or more when that saves space.
        on_corrupt: ``"raise"`` (default) raises :class:`CorruptCheckpointError` when a
            stored file is damaged; ``"fallback"`` logs a warning on the
            ``statekeeper.backends.file.checkpointer`` logger and skips it, so ``get_tuple``
            returns the newest intact checkpoint and ``list`` the intact ones. A
            checkpoint asked for by id is never substituted: it loads or raises.
        options: :class:`~statekeeper.backends.file.DirectoryOptions`, as keywords:
          mode: ``"rw"`` (default) reads and writes; ``"ro"`` only reads — nothing is ever
              created or changed (no directory, file or lock file), every write and
              ``claim_thread`` raise :class:`ReadOnlyError`, and a missing directory raises
              :class:`StorageNotFoundError`. A directory that is not writable (a read-only
              mount) is opened read-only whatever ``mode`` says; :attr:`read_only` tells.
          lock_timeout: seconds a writer waits for a thread's lock (held by another
              process, or another thread of this one).
          fsync: flush every write to disk before it counts, so a committed checkpoint
              survives a power loss (the default). ``False`` keeps every write atomic —
              a killed process still leaves the old or the new checkpoint — but a power
              loss may lose the last checkpoints (detected: see ``docs/file-backend.md``).

    Each ``put``, ``put_writes``, ``copy_thread``, ``prune`` and ``delete_*`` is atomic
    per namespace: a failed call leaves what was stored before. Payloads are never pickled.
    A read returns exactly what was stored or raises :class:`CorruptCheckpointError`: every
    record is checksummed, and a log lacking lines its head says were committed is damage.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        serde: SerializerProtocol | None = None,
        compress: bool = True,
        on_corrupt: str = "raise",
        **options: Unpack[DirectoryOptions],
    ) -> None:
        super().__init__(serde=serde or safe_serde())
        opened = opening(options)
        check_choice("on_corrupt", on_corrupt, ON_CORRUPT)
        self.compress = check_option("compress", bool, compress)
        self.on_corrupt = on_corrupt
        root = Path(path).expanduser()
        self._store = Store(
            root,
            opened.lock_timeout,
            lenient=on_corrupt == "fallback",
            durable=opened.fsync,
            read_only=opened.read_only,
        )
        self.read_only = self._store.read_only
        self._closed = False
        if not self.read_only:
            _open_index(self._store, self._store.catalog)
        # the last list written per (thread, namespace, channel): what a delta builds on
        self._recent = RecentPayloads()
        self._values = ValuePlanner(self._recent, compress)
        self._claims = LockFileClaims(root / CLAIMS_DIR)
        # the async API's calls of a turn, served in turn by one thread (_storage/worker.py)
        self._worker = BatchWorker("statekeeper-file-client", run_each, self._closed_error)

    @classmethod
    def from_url(cls, url: StorageURL, options: Mapping[str, Any]) -> Self:
        """Open the directory a ``file://`` URL names, with its query options (text) and
        keyword ``options``; keywords win."""
        return cls(directory_path(url), **parse_options("file", _OPTIONS, url.options, options))

    @property
    def path(self) -> str:
        """The directory, as given (a relative path stays relative)."""
        return str(self._store.root)

    def close(self) -> None:
        """Mark the checkpointer closed (it holds no open file between calls), once the
        async calls already queued are done. Idempotent; later calls raise StorageError."""
        self._worker.close()
        self._closed = True

    def _closed_error(self) -> StorageError:
        return StorageError(f"the file checkpointer on {self.path!r} is closed; open a new one")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r})"

    def _open_store(self) -> Store:
        if self._closed:
            raise self._closed_error()
        return self._store

    # -- reading -----------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names, or the newest of its thread and namespace when
        it names none; ``None`` when there is none."""
        thread_id, ns, checkpoint_id = location(config)
        store = self._open_store()
        reader = Reader(self.serde, store, store.namespace(thread_id, ns), self._recent)
        if checkpoint_id is not None:
            found = next(store.newest(reader.n, None, checkpoint_id), None)
            return None if found is None else reader.load(found, may_skip=False)
        for entry in store.newest(reader.n, None):
            if (loaded := reader.load(entry, may_skip=True)) is not None:
                return loaded
        return None

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first (by checkpoint id, then thread and namespace, across
        threads when ``config`` is ``None``), whose metadata equals ``filter`` on every
        key, strictly older than ``before``; at most ``limit``. Logs are read from the end
        in pages, so the first items come without reading a whole history; across threads,
        the directory's index names the namespaces to read, newest first, so the first
        items come without opening every thread (each checked against its log; without an
        index to trust, every namespace is read)."""
        if (limit := check_limit(limit)) is not None and limit <= 0:
            return
        thread_id, ns, checkpoint_id = list_scope(config)
        below = before_id(before)
        store = self._open_store()

        first_page = min(limit or 16, 16)
        memos: dict[Namespace, Memo] = {}  # payloads rebuilt from deltas, per namespace
        seen: dict[Namespace, dict[str, Entry]] = {}  # lines read, per namespace
        remaining = limit
        scope = (thread_id, ns, checkpoint_id)
        for _, n, entry in listing(store, scope, below, first_page, seen):
            reader = Reader(self.serde, store, n, self._recent, memos.setdefault(n, {}), seen[n])
            loaded = reader.load(entry, may_skip=True, filter=filter)
            if loaded is None:
                continue
            yield loaded
            if remaining is not None:
                remaining -= 1
                if remaining == 0:
                    return

    def _thread_heads(self, limit: int, after: Head | None) -> Heads:
        """Each thread's newest root checkpoint id, from the index (``index/``): a page
        costs O(limit) small reads, each head checked against its thread's log; or, when
        there is no index to trust (a directory read as it was written before it had one,
        one damaged or being rebuilt), from every thread's root log: O(threads)."""
        return thread_heads(self._open_store(), limit, after)

    def get_writes(self, config: RunnableConfig) -> TaskWrites:
        """See :meth:`Checkpointer.get_writes`: the writes ``get_tuple`` returns, with their
        ``task_path``. ConfigurationError without a ``checkpoint_id``; a damaged writes
        file raises CorruptCheckpointError."""
        thread_id, ns, checkpoint_id = location(config)
        if checkpoint_id is None:
            raise ConfigurationError("get_writes needs a checkpoint_id in the config")
        n = self._open_store().namespace(thread_id, ns)
        with reporting(n, checkpoint_id):
            return task_writes(self.serde, n.write_rows(checkpoint_id))

    def _claim(self, thread_id: str) -> contextlib.AbstractContextManager[None]:
        """A claim (see :meth:`Checkpointer.claim_thread`) is a lock file in ``claims/``
        under the directory, shared by every process using it."""
        self._open_store()
        return self._claims.claim(thread_id)

    def _claim_holder(self, thread_id: str) -> dict[str, Any] | None:
        return self._claims.holder(thread_id)  # reads only: no store is opened

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        result: CheckpointTuple | None = await self._worker.submit(
            functools.partial(self.get_tuple, config)
        )
        return result

    async def _acommit_put(self, prepared: PreparedPut) -> None:
        await self._worker.submit(functools.partial(self._commit_put, prepared))

    async def _acommit_writes(self, prepared: PreparedWrites) -> None:
        await self._worker.submit(functools.partial(self._commit_writes, prepared))

    # -- storing (checked and prepared by Checkpointer) ---------------------------------

    def _commit_put(self, prepared: PreparedPut) -> None:
        """Store a prepared checkpoint with the values of its new versions: they are
        serialised before the thread's lock is taken; the checkpoint exists once its line
        (holding its small values) is appended and flushed, after the files of its large
        values are durable."""
        prepared = prepared.packed()
        thread_id, ns, checkpoint_id = (
            prepared.thread_id,
            prepared.checkpoint_ns,
            prepared.checkpoint_id,
        )
        plans = plan_values(self.serde, self._values, prepared)
        type_, codec, body = prepared.checkpoint
        store = self._open_store()
        n = store.namespace(thread_id, ns)
        with store.checkpoints_lock(thread_id), self._change(thread_id) as change:
            store.ensure(n)
            with reporting(n, checkpoint_id), store.index(n, writable=True) as view:
                placed = place_values(n, view, prepared, plans)
                entry = make_entry(
                    {
                        "checkpoint_id": checkpoint_id,
                        "parent_checkpoint_id": prepared.parent_id,
                        "run_id": prepared.run_id,
                        "metadata": prepared.metadata,
                        "channel_versions": prepared.channel_versions,
                        "values": placed.values,  # channel -> the line holding its value
                        "stored": placed.stored,  # the values this checkpoint created
                        "type": type_,
                        "codec": codec,
                        "checkpoint": base64.b64encode(body).decode("ascii"),
                    }
                )
                prior = view.last.checkpoint_id if view.last is not None else None
                change.intent(ns, [checkpoint_id])  # announced in the index first
                store.commit(n, view, entry)
                if ns == "":
                    change.head(max(prior or checkpoint_id, checkpoint_id))
        self._compact(change)
        for channel, remembered in placed.remember.items():  # only now: it is committed
            self._recent.put((thread_id, ns, channel), remembered)

    def _commit_writes(self, prepared: PreparedWrites) -> None:
        """Store prepared writes as one appended, flushed line (nothing when every one is
        already stored). A damaged writes line of this checkpoint raises
        CorruptCheckpointError and nothing is added. Runs under the thread's writes lock,
        not the lock ``put`` holds."""
        prepared = prepared.packed()
        task_id, task_path, checkpoint_id = (
            prepared.task_id,
            prepared.task_path,
            prepared.checkpoint_id,
        )
        rows = [
            (task_id, w.idx, w.channel, task_path, w.type, w.codec, w.data) for w in prepared.writes
        ]
        store = self._open_store()
        n = store.namespace(prepared.thread_id, prepared.checkpoint_ns)
        while True:
            if not n.index.exists():  # the folders are created under the checkpoints lock
                with store.checkpoints_lock(n.thread_id):
                    store.ensure(n)
            with store.writes_lock(n.thread_id):
                if n.index.exists():  # else the thread was deleted meanwhile: create it again
                    with reporting(n, checkpoint_id):
                        n.merge_writes(checkpoint_id, rows)
                    return

    def _delete_threads(self, thread_ids: Sequence[str]) -> None:
        """One rename per thread makes the whole thread disappear at once."""
        store = self._open_store()
        for thread_id in thread_ids:
            with store.lock(thread_id), self._change(thread_id) as change:
                if store.thread_dir(thread_id).exists():
                    change.pending()
                    remove_thread(store, thread_id)
                    change.gone()
            self._compact(change)

    def _delete_runs(self, run_ids: Sequence[str]) -> None:
        ids = set(run_ids)
        store = self._open_store()
        for thread_id in store.thread_ids():
            with store.lock(thread_id), self._change(thread_id) as change:
                for n in store.namespaces(thread_id):
                    drop_runs(store, n, ids, change)
            self._compact(change)

    def _copy_thread(self, source: str, target: str) -> None:
        """Copy the source's folders (its immutable value files shared), published with
        one rename; ThreadExistsError (nothing changed) if the target has checkpoints."""
        store = self._open_store()
        with store.lock(source, target):
            if store.has_checkpoints(target):
                raise ThreadExistsError(
                    f"cannot copy thread {short(source)} into {short(target)}: the target "
                    "already has checkpoints; delete it first or choose a new thread id"
                )
            with reporting(store.namespace(source, "")), self._change(target) as change:
                for n in store.namespaces(source):  # announced in the index first
                    change.intent(n.ns, [e.checkpoint_id for e in n.entries() if not e.deleted])
                change.pending()
                copy_thread(store, source, target)
        self._compact(change)

    def _keep_latest(self, ids: Sequence[str]) -> None:
        store = self._open_store()
        for thread_id in ids:
            with store.lock(thread_id), self._change(thread_id) as change:
                for n in store.namespaces(thread_id):
                    keep_latest(store, n, change)
            self._compact(change)

    def _change(self, thread_id: str) -> contextlib.AbstractContextManager[Change]:
        """The index's record of a change of ``thread_id``, made in the block (the caller
        holds the thread's lock)."""
        store = self._open_store()
        return store.catalog.change(thread_id, lambda: root_head(store, thread_id))

    def _compact(self, change: Change) -> None:
        """Compact the index if ``change`` found it due (called holding no thread lock)."""
        store = self._store
        store.catalog.compact(change, lambda thread_id: root_head(store, thread_id))

    # -- DeltaChannel support ------------------------------------------------------------

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Per channel: the writes on the target's ancestor path (oldest first, each
        checkpoint's in ``writes_sort_key`` order) back to the nearest ancestor holding a
        value, which is the ``seed``. Follows parent ids through the ``checkpoints`` file
        (bisecting it once per ancestor), reading only the writes and seeds it needs."""
        if not channels:
            return {}
        thread_id, ns, checkpoint_id = location(config)
        store = self._open_store()
        n = store.namespace(thread_id, ns)
        return delta_history(self.serde, store, n, checkpoint_id, channels)

    # -- integrity -----------------------------------------------------------------------

    def verify(self, *, repair: bool = False, quarantine: bool = False) -> Damages:
        """Check every stored file; return what is damaged (reason, the kind of record,
        path, and the thread, namespace and checkpoint it belongs to): damaged lines,
        files and heads, and committed lines a log lacks (cut short, a line deleted, an
        older copy put back, a missing log or head).

        With ``quarantine=True``, move damaged files into ``quarantine/<timestamp>/``
        under the directory, and rewrite each log without its damaged lines and the
        checkpoints that need a damaged file (the old file is kept in quarantine), so
        that every checkpoint left loads. With ``repair=True``, rebuild from what is
        there the heads and manifests that disagree with their logs, write again a log
        whose chain is broken, and an empty log for one that is missing: the loss is
        accepted (it is in the list returned), and reads work again. Neither deletes
        anything, except temporary files that interrupted writes left (they never held
        a committed checkpoint) and the folders interrupted deletes and copies left in
        ``trash/``; what they replace is kept in quarantine. Without either, nothing is
        changed but those leftovers (and nothing at all when read-only).

        Raises:
            ReadOnlyError: ``repair`` or ``quarantine`` on a read-only checkpointer.
        """
        if repair or quarantine:
            self._writable("verify(repair=True)" if repair else "verify(quarantine=True)")
        found = verify(self._open_store(), quarantine=quarantine, repair=repair)
        return [
            Damage(
                f.reason,
                backend="file",
                thread_id=f.thread_id,
                checkpoint_ns=f.checkpoint_ns,
                checkpoint_id=f.checkpoint_id,
                record=f.record,
                path=str(f.path),
            )
            for f in found
        ]


def _open_index(store: Store, catalog: Catalog) -> None:
    """Build the index if it must be before it is used (read-write opens only): the
    directory was written before it had one, or the machine restarted since it was written
    (its last lines may be lost), or it is missing or damaged. Skipped if another process
    is building it (reads meanwhile read every thread)."""
    if (reason := catalog.stale()) is None:
        return
    log.info("building the index of %s (%s)", store.root, reason)
    try:
        catalog.rebuild(lambda: scan_threads(store), wait=False, only_if_stale=True)
    except (OSError, StorageError) as exc:  # reads go on without it; the next open retries
        log.warning("could not build the index of %s: %s", store.root, exc)
