"""What :class:`~statekeeper.checkpointers.base.Checkpointer`'s write path hands a backend.

``put`` and ``put_writes`` are checked and prepared once, in the base class, the same way
for every backend; the backend receives one of these records and only stores it. A record
holds checked values only: every id and channel name is storable text, the metadata and
every channel version are JSON, and the checkpoint and the pending writes are already
serialised (through the saver's ``serde``, checked to round-trip exactly). What is left to
a backend is the channel values, which each one plans as append deltas on its own storage.

The records are immutable, and the mappings they hold must not be changed: ``values`` is
the caller's checkpoint's own ``channel_values`` (the put path copies no value).

The async API prepares a record on the event loop's thread but leaves compressing its
payloads (``deferred``) to the thread that stores it, which calls ``packed()``: zlib lets
go of the interpreter lock at every call, and on the loop's thread that hands the loop
over to the storing thread (docs/benchmarks.md, "What compression costs"). The bytes
stored are the same either way.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, NamedTuple

from langchain_core.runnables import RunnableConfig

from statekeeper._storage.payload import pack
from statekeeper.checkpointers.semantics import checkpoint_config

__all__ = ["Encoded", "NewVersion", "PreparedPut", "PreparedWrites", "WriteRow"]


class Encoded(NamedTuple):
    """A payload as ``serde`` wrote it and :func:`~statekeeper._storage.payload.encode`
    packed it: ``serde``'s type name, the codec (``""`` or ``"zlib"``) and the bytes."""

    type: str
    codec: str
    data: bytes


class NewVersion(NamedTuple):
    """One entry of ``put``'s ``new_versions``: a channel whose value this checkpoint
    stores (or, when the checkpoint carries no value for it, marks as empty)."""

    channel: str  # checked: storable text
    version: Any  # as given (a string, or a number from another saver)
    key: str  # the version as stored text (see semantics.version_key)


class WriteRow(NamedTuple):
    """One pending write of a ``put_writes`` call, serialised.

    ``idx`` is the write's position in the call, or, for LangGraph's special channels
    (``__error__``, ``__interrupt__``...), their fixed negative index from
    ``WRITES_IDX_MAP``: a regular write already stored for (task, ``idx``) is kept (the
    call is idempotent), a special one is replaced (:attr:`replaces`).
    """

    idx: int
    channel: str
    type: str
    codec: str
    data: bytes

    @property
    def replaces(self) -> bool:
        """Whether this write replaces one stored for the same (task, ``idx``)."""
        return self.idx < 0


@dataclass(frozen=True, slots=True)
class PreparedPut:
    """A checked ``put``: store the checkpoint ``checkpoint_id`` as a child of
    ``parent_id`` in (``thread_id``, ``checkpoint_ns``).

    ``checkpoint`` is the checkpoint without its channel values, serialised;
    ``channel_versions`` maps every channel (name checked) to its version as given and
    ``version_keys`` to that version as stored text; ``new_versions`` are the channels
    whose value this checkpoint stores, in ``put``'s order, taken from ``values`` when
    it holds them. ``metadata`` is what is stored (the caller's merged with the config's,
    see :func:`~statekeeper.checkpointers.semantics.merged_metadata`), and
    ``metadata_json`` its canonical JSON text. ``run_id`` is the metadata's ``run_id``
    when it is non-empty text (checked), else ``None``: what ``delete_for_runs`` finds.
    """

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    parent_id: str | None
    run_id: str | None
    metadata: dict[str, Any]
    metadata_json: str
    checkpoint: Encoded
    channel_versions: dict[str, Any]
    version_keys: dict[str, str]
    new_versions: tuple[NewVersion, ...]
    values: dict[str, Any]
    deferred: int | None = None  # compression left to :meth:`packed`: from this many bytes

    @property
    def config(self) -> RunnableConfig:
        """The config that names the stored checkpoint: what ``put`` returns."""
        return checkpoint_config(self.thread_id, self.checkpoint_ns, self.checkpoint_id)

    def packed(self) -> PreparedPut:
        """This put with its checkpoint compressed, if that was deferred (see the module
        docstring); else this put."""
        if self.deferred is None:
            return self
        type_, _, data = self.checkpoint
        checkpoint = Encoded(type_, *pack(data, compress=True, min_bytes=self.deferred))
        return dataclasses.replace(self, checkpoint=checkpoint, deferred=None)


@dataclass(frozen=True, slots=True)
class PreparedWrites:
    """A checked ``put_writes``: store ``writes`` (in the call's order) of the task
    ``task_id`` (at ``task_path``) for the checkpoint ``checkpoint_id`` of
    (``thread_id``, ``checkpoint_ns``). ``writes`` may be empty."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    task_id: str
    task_path: str
    writes: tuple[WriteRow, ...]
    deferred: int | None = None  # compression left to :meth:`packed`: from this many bytes

    def packed(self) -> PreparedWrites:
        """These writes with their payloads compressed, if that was deferred (see the
        module docstring); else these writes."""
        if self.deferred is None:
            return self
        writes = tuple(_packed(row, self.deferred) for row in self.writes)
        return dataclasses.replace(self, writes=writes, deferred=None)


def _packed(row: WriteRow, min_bytes: int) -> WriteRow:
    codec, data = pack(row.data, compress=True, min_bytes=min_bytes)
    return row._replace(codec=codec, data=data)
