"""``list`` and ``alist`` of the PostgreSQL checkpointer: pages of checkpoints newest first.

Each page is one operation (one statement reading up to 100 checkpoints with their values
and writes, plus the delta chains this process does not remember), so a long history
streams without holding a connection between items. Metadata filters are pushed down to
``jsonb`` equality where the row's metadata fits ``jsonb``, as a pre-selection: every row
is checked again exactly with :func:`~statekeeper.checkpointers.semantics.matches`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.checkpoint.serde.base import SerializerProtocol

from statekeeper.backends.postgres import encode_id
from statekeeper.backends.postgres._database import Database
from statekeeper.backends.postgres._integrity import check_checkpoint
from statekeeper.backends.postgres._reads import Raw, Reader, decode_raw, split_full
from statekeeper.backends.postgres._running import Op, Q
from statekeeper.backends.postgres._schema import SELECT_FULL
from statekeeper.checkpointers.semantics import before_id, list_scope, matches
from statekeeper.errors import CorruptCheckpointError

__all__ = ["Listing"]

logger = logging.getLogger("statekeeper.backends.postgres.checkpointer")
_PAGE = 100
Cursor = tuple[str, str, str]
Page = list[Raw | CorruptCheckpointError]


@dataclass(frozen=True)
class Listing:
    """The listings of one checkpointer."""

    db: Database
    reader: Reader
    serde: SerializerProtocol
    on_corrupt: str

    def items(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
        quiet: str | None = None,
    ) -> Iterator[CheckpointTuple]:
        """``list``; ``quiet``: a checkpoint id whose damage was reported already."""
        if limit is not None and limit <= 0:
            return
        where, params, whole, scope = _conditions(config, filter, before)
        remaining, after = limit, None
        while True:
            size = _page_size(filter, remaining, after)
            page, after, done = self.db.run(
                lambda: self._page(where, params, filter, after, size)  # noqa: B023
            )
            for item in page:
                found = self._decoded(item, quiet)
                if found is None:
                    continue
                yield found
                if remaining is not None:
                    remaining -= 1
                    if remaining == 0:
                        return
            if done:
                break
        if whole:
            for error in self.db.run(lambda: self.reader.scope_damage(scope)):
                self._damaged(error)

    async def aitems(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """:meth:`items` on the asyncio pool."""
        if limit is not None and limit <= 0:
            return
        where, params, whole, scope = _conditions(config, filter, before)
        remaining, after = limit, None
        while True:
            size = _page_size(filter, remaining, after)
            page, after, done = await self.db.arun(
                lambda: self._page(where, params, filter, after, size)  # noqa: B023
            )
            for item in page:
                found = self._decoded(item, None)
                if found is None:
                    continue
                yield found
                if remaining is not None:
                    remaining -= 1
                    if remaining == 0:
                        return
            if done:
                break
        if whole:
            for error in await self.db.arun(lambda: self.reader.scope_damage(scope)):
                self._damaged(error)

    def _page(
        self,
        where: list[str],
        params: list[Any],
        filter: dict[str, Any] | None,
        after: Cursor | None,
        size: int,
    ) -> Op[tuple[Page, Cursor | None, bool]]:
        clauses, args = [*where], [*params]
        if after is not None:
            clauses.append("(c.checkpoint_id, c.thread_id, c.checkpoint_ns) < (%s, %s, %s)")
            args.extend(after)
        statement = SELECT_FULL
        if clauses:
            statement += " WHERE " + " AND ".join(clauses)
        statement += (
            " ORDER BY c.checkpoint_id DESC, c.thread_id DESC, c.checkpoint_ns DESC LIMIT %s"
        )
        rows = yield Q(statement, (*args, size))
        page: Page = []
        memo: dict[tuple[str, ...], bytes] = {}  # checkpoints of a page share values
        last = None
        for found in rows:
            row, values, writes = split_full(found)
            last = (row.checkpoint_id, row.thread_id, row.checkpoint_ns)
            try:
                check_checkpoint(row, self.reader.where(*last[1:], last[0]))
                if filter and not matches(json.loads(row.metadata), filter):
                    continue
                raw = yield from self.reader.verified(row, values, writes, memo, checked=True)
                page.append(raw)
            except CorruptCheckpointError as exc:
                page.append(exc)
        return page, last, len(rows) < size

    def _decoded(
        self, item: Raw | CorruptCheckpointError, quiet: str | None
    ) -> CheckpointTuple | None:
        try:
            if isinstance(item, CorruptCheckpointError):
                raise item
            return decode_raw(self.serde, item)
        except CorruptCheckpointError as exc:
            if exc.checkpoint_id is None or exc.checkpoint_id != quiet:
                self._damaged(exc)
            return None

    def _damaged(self, error: CorruptCheckpointError) -> None:
        if self.on_corrupt != "fallback":
            raise error
        logger.warning("skipped damaged data (on_corrupt=fallback): %s", error)


def _page_size(filter: dict[str, Any] | None, remaining: int | None, after: Cursor | None) -> int:
    """Rows to read next: what is still wanted, up to a page. A filtered listing reads
    whole pages after its first, since the rows it reads may still fail the exact check
    in Python (metadata ``jsonb`` cannot hold, keys not pushed down)."""
    if remaining is None or (filter and after is not None):
        return _PAGE
    return min(remaining, _PAGE)


def _conditions(
    config: RunnableConfig | None,
    filter: dict[str, Any] | None,
    before: RunnableConfig | None,
) -> tuple[list[str], list[Any], bool, tuple[str | None, str | None]]:
    """SQL conditions (parameterised) narrowing a listing, whether it lists whole threads
    (so ends with a check of the head records), and its (thread, namespace) scope."""
    thread_id, ns, checkpoint_id = list_scope(config)
    below = before_id(before)
    where: list[str] = []
    params: list[Any] = []
    for column, value in (
        ("c.thread_id = %s", thread_id),
        ("c.checkpoint_ns = %s", ns),
        ("c.checkpoint_id = %s", checkpoint_id),
        ("c.checkpoint_id < %s", below),
    ):
        if value is not None:
            where.append(column)
            params.append(encode_id(value))
    for key, value in (filter or {}).items():
        pushed = _pushdown(key, value)
        if pushed is not None:
            where.append("(c.metadata_doc IS NULL OR c.metadata_doc -> %s = %s::jsonb)")
            params.extend(pushed)
    whole = not filter and before is None and checkpoint_id is None
    scope = (
        encode_id(thread_id) if thread_id is not None else None,
        encode_id(ns) if ns is not None else None,
    )
    return where, params, whole, scope


def _pushdown(key: Any, value: Any) -> tuple[str, str] | None:
    """``(key, value as JSON)`` for a filter entry ``jsonb`` can compare, else ``None``
    (left to the exact check): ``None`` also matches a missing key, NUL and lone
    surrogates cannot be sent or held."""
    if value is None or not isinstance(key, str) or "\x00" in key:
        return None
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
        key.encode("utf-8")
        text.encode("utf-8")
    except (TypeError, ValueError):
        return None
    if "\\u0000" in text:
        return None
    return key, text
