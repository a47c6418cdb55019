"""Memory stores: LangGraph ``BaseStore`` implementations chosen by URL.

>>> from statekeeper.memory import open_store
>>> with open_store("sqlite:///.statekeeper/memory.db") as store:  # doctest: +SKIP
...     graph = builder.compile(checkpointer=saver, store=store)

Search works without an embedding model: a query is scored by lexical relevance, a
normalised score in [0, 1] (see ``docs/memory-store.md``); with ``index={"embed": ...}``
the score mixes in the cosine similarity of the embeddings.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import TracebackType
from typing import Any, ClassVar, Self

from langchain_core.embeddings import Embeddings
from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    InvalidNamespaceError,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchOp,
    TTLConfig,
    ensure_embeddings,
    validate_op_namespace,
)

from statekeeper._sqlite import MEMORY, Database
from statekeeper._urls import StorageURL, parse_options, parse_url, redact
from statekeeper.errors import ConfigurationError
from statekeeper.memory import _lexical
from statekeeper.memory._sqlite_store_ops import (
    Write,
    check_page,
    get,
    list_namespaces,
    refresh_ttl,
    sweep,
    write,
)
from statekeeper.memory._sqlite_store_schema import MIGRATIONS, fts_terms, namespace_text
from statekeeper.memory._sqlite_store_search import search
from statekeeper.memory._sqlite_store_values import (
    Fields,
    check_filter,
    check_text,
    encode_value,
    indexed_texts,
    pack_vector,
    parse_fields,
    unpack_vector,
)

__all__ = ["SqliteStore", "known_store_schemes", "open_store"]

_OPTIONS: dict[str, type] = {"busy_timeout": float, "semantic_weight": float, "ttl": object}
_TTL_KEYS = ("default_ttl", "refresh_on_read", "omit_expired", "sweep_interval_minutes")
_SCHEMES = ("memory", "sqlite")


class SqliteStore(BaseStore):
    """A LangGraph store in one SQLite file (or in memory with ``":memory:"``).

    Args:
        path: the database file; created with its parent directories if missing. It may
            be the file a :class:`~statekeeper.checkpointers.SqliteCheckpointer` uses.
        index: LangGraph's index configuration: ``fields`` (paths to the text to search;
            default: a note's ``text`` and ``topics``, every string of other values) and,
            optionally, ``embed`` (a LangChain ``Embeddings``, an embedding function or a
            ``"provider:model"`` string) with ``dims``. Without ``embed``, search is lexical.
        ttl: LangGraph's TTL configuration: ``default_ttl`` (minutes) and
            ``refresh_on_read`` (default true). Expired items are never returned and are
            deleted by the next write or :meth:`sweep_ttl`.
        busy_timeout: seconds a writer waits for another process's write lock.
        semantic_weight: with ``embed``, the share of the score that is semantic.

    Guarantees: a batch runs its operations in order in one transaction (a failed batch
    writes nothing); values are stored as JSON and come back equal (others are refused
    with :class:`~statekeeper.errors.SerializationError`); namespaces, keys and filters of
    any unicode text are stored and matched exactly; every SQL statement is
    parameterised. One object serves the sync and async APIs from any thread.
    """

    supports_ttl: bool = True
    #: Search scores are the normalised relevance of ``docs/memory-store.md``: recall
    #: trusts them as they are instead of scoring the items again.
    relevance_scores: ClassVar[bool] = True

    def __init__(
        self,
        path: str = MEMORY,
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        busy_timeout: float = 30.0,
        semantic_weight: float = 0.5,
    ) -> None:
        if not 0.0 <= semantic_weight <= 1.0:
            raise ConfigurationError(f"semantic_weight must be in [0, 1], got {semantic_weight}")
        self.semantic_weight = semantic_weight
        self.ttl_config = _check_ttl_config(ttl)
        self.index_config = dict(index) if index is not None else None
        self.embeddings, self._dims, self._fields = _check_index(index)
        self._db = Database(
            path, component="memory", migrations=MIGRATIONS, busy_timeout=busy_timeout
        )

    @classmethod
    def from_url_options(
        cls,
        path: str,
        url_options: Mapping[str, str],
        options: Mapping[str, Any],
        index: IndexConfig | None = None,
    ) -> Self:
        """Build from URL query options (text) and keyword options; keywords win."""
        return cls(
            path, index=index, **parse_options("memory store", _OPTIONS, url_options, options)
        )

    @property
    def path(self) -> str:
        """The database file (``":memory:"`` for an in-memory database)."""
        return self._db.path

    def close(self) -> None:
        """Close the database. Idempotent; later calls raise StorageError."""
        self._db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r})"

    # -- operations ----------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` in order in one transaction; results in the same order."""
        plan = self._plan(ops)
        if self.embeddings is None or not plan.wants_embeddings:
            return self._run(plan)
        documents = self.embeddings.embed_documents(plan.texts) if plan.texts else []
        queries = [self.embeddings.embed_query(q) for q in plan.queries]
        return self._run(plan.embedded(documents, queries, self._dims))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """:meth:`batch` for asyncio: embeddings are awaited, the database work runs in a
        worker thread, so the event loop never waits for SQLite."""
        plan = self._plan(ops)
        if self.embeddings is not None and plan.wants_embeddings:
            documents = await self.embeddings.aembed_documents(plan.texts) if plan.texts else []
            queries = [await self.embeddings.aembed_query(q) for q in plan.queries]
            plan = plan.embedded(documents, queries, self._dims)
        return await asyncio.to_thread(self._run, plan)

    def sweep_ttl(self) -> int:
        """Delete every expired item now; return how many. (Writes do this as well.)"""
        with self._db.transaction(write=True) as conn:
            return sweep(conn, time.time())

    def _plan(self, ops: Iterable[Op]) -> _Plan:
        # Validation and encoding happen here, before any lock is taken.
        plan = _Plan()
        for op in ops:
            if isinstance(op, PutOp):
                plan.steps.append(self._write(op, plan))
            elif isinstance(op, GetOp | SearchOp | ListNamespacesOp):
                validate_op_namespace(op)
                if isinstance(op, GetOp):
                    check_text(op.key, "key")
                elif isinstance(op, SearchOp):
                    _check_search(op)
                    if op.query and op.query.strip() and op.query not in plan.queries:
                        plan.queries.append(op.query)
                plan.steps.append(op)
            else:
                raise ConfigurationError(f"unknown store operation: {op!r}")
        return plan

    def _write(self, op: PutOp, plan: _Plan) -> Write:
        validate_op_namespace(op)
        check_text(op.key, "key")
        namespace = namespace_text(op.namespace)
        if op.value is None:
            return Write(namespace, op.key, None, None, "", ())
        if not op.namespace or op.namespace[0] == "langgraph":
            raise InvalidNamespaceError(
                f"cannot put into namespace {op.namespace!r}: it must have at least one "
                "label and its first label cannot be 'langgraph'"
            )
        if op.ttl is not None and not (isinstance(op.ttl, int | float) and op.ttl > 0):
            raise ConfigurationError(f"ttl must be a number of minutes > 0, got {op.ttl!r}")
        value = encode_value(op.value)
        texts: list[tuple[str, str]] = []
        if op.index is not False:
            fields = self._fields if op.index is None else parse_fields(op.index)
            texts = indexed_texts(op.value, fields)
        terms = fts_terms(_lexical.terms("\n".join(text for _, text in texts)))
        plan.to_embed.append((len(plan.steps), tuple(path for path, _ in texts)))
        plan.texts.extend(text for _, text in texts)
        return Write(namespace, op.key, value, op.ttl, terms, ())

    def _run(self, plan: _Plan) -> list[Result]:
        now = time.time()
        writes = any(isinstance(step, Write) for step in plan.steps)
        results: list[Result] = []
        refresh: list[int] = []
        with self._db.transaction(write=writes) as conn:
            if writes:
                sweep(conn, now)
            for step in plan.steps:
                if isinstance(step, Write):
                    write(conn, step, now)
                    results.append(None)
                elif isinstance(step, GetOp):
                    item, item_id = get(conn, step, now)
                    results.append(item)
                    if item_id is not None:
                        refresh.append(item_id)
                elif isinstance(step, SearchOp):
                    vector = plan.query_vectors.get(step.query or "")
                    found, ids = search(conn, step, now, vector, self.semantic_weight)
                    results.append(found)
                    refresh.extend(ids)
                else:
                    results.append(list_namespaces(conn, step, now))
            if writes and refresh:
                refresh_ttl(conn, refresh, now)
        if refresh and not writes:
            # Reads take no write lock unless an item they returned has a TTL to restart.
            with self._db.transaction(write=True) as conn:
                refresh_ttl(conn, refresh, now)
        return results


@dataclass
class _Plan:
    """A batch ready to run: puts encoded, and the texts and queries to embed."""

    steps: list[Write | GetOp | SearchOp | ListNamespacesOp] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)  # every put's indexed texts, in order
    to_embed: list[tuple[int, tuple[str, ...]]] = field(default_factory=list)  # step, paths
    queries: list[str] = field(default_factory=list)  # distinct non-blank queries
    query_vectors: dict[str, tuple[float, ...]] = field(default_factory=dict)

    @property
    def wants_embeddings(self) -> bool:
        return bool(self.texts or self.queries)

    def embedded(
        self,
        documents: Sequence[Sequence[float]],
        queries: Sequence[Sequence[float]],
        dims: int | None,
    ) -> _Plan:
        """This plan with the embeddings of its texts and queries attached."""
        if len(documents) != len(self.texts) or len(queries) != len(self.queries):
            raise ConfigurationError(
                "the embedding model returned a different number of vectors than texts"
            )
        steps = list(self.steps)
        vectors = iter(documents)
        for index, paths in self.to_embed:
            step = steps[index]
            assert isinstance(step, Write)
            packed = tuple((path, pack_vector(next(vectors), dims)) for path in paths)
            steps[index] = replace(step, vectors=packed)
        query_vectors = {
            query: unpack_vector(pack_vector(vector, dims))
            for query, vector in zip(self.queries, queries, strict=True)
        }
        return replace(self, steps=steps, query_vectors=query_vectors)


def _check_search(op: SearchOp) -> None:
    check_page(op.limit, op.offset)
    if op.query is not None and not isinstance(op.query, str):
        raise ConfigurationError(f"a search query must be text, got {op.query!r}")
    if op.filter is not None:
        check_filter(op.filter)


def _check_index(
    index: IndexConfig | None,
) -> tuple[Embeddings | None, int | None, Fields | None]:
    if index is None:
        return None, None, None
    if not isinstance(index, Mapping):
        raise ConfigurationError(
            f"index must be a mapping (LangGraph's IndexConfig), got {index!r}"
        )
    fields = parse_fields(index.get("fields"))
    dims = index.get("dims")
    if dims is not None and (not isinstance(dims, int) or dims < 1):
        raise ConfigurationError(f"index dims must be a positive integer, got {dims!r}")
    embed = index.get("embed")
    if embed is None:
        return None, dims, fields
    try:
        return ensure_embeddings(embed), dims, fields
    except ValueError as exc:
        raise ConfigurationError(f"cannot use the index's embed: {exc}") from exc


def _check_ttl_config(ttl: TTLConfig | None) -> TTLConfig | None:
    if ttl is None:
        return None
    unknown = [key for key in ttl if key not in _TTL_KEYS]
    if unknown:
        raise ConfigurationError(f"unknown ttl option(s) {unknown}; known: {', '.join(_TTL_KEYS)}")
    default = ttl.get("default_ttl")
    if default is not None and not (
        isinstance(default, int | float) and math.isfinite(default) and default > 0
    ):
        raise ConfigurationError(f"default_ttl must be minutes > 0, got {default!r}")
    return ttl


# -- URLs ---------------------------------------------------------------------------------


def known_store_schemes() -> list[str]:
    """The URL schemes :func:`open_store` accepts."""
    return list(_SCHEMES)


def open_store(url: str, *, index: IndexConfig | None = None, **options: Any) -> SqliteStore:
    """Open the memory store that ``url`` names: a LangGraph ``BaseStore`` that is also a
    context manager and has ``close()``.

    Schemes:

    * ``memory://`` — in this process only (SQLite in memory: the same semantics).
    * ``sqlite:///relative/path.db``, ``sqlite:////absolute/path.db`` — may be the file the
      checkpoints are in.

    ``index`` is LangGraph's index configuration (see :class:`SqliteStore`). ``options``:
    ``busy_timeout``, ``semantic_weight`` (also as URL query options, keywords win) and
    ``ttl`` (LangGraph's ``TTLConfig``; keyword only).

    Raises:
        ConfigurationError: the URL is malformed, its scheme is unknown (the message lists
            the known ones), or an option is unknown or invalid.
        StorageError: the database cannot be opened.
    """
    if isinstance(url, str) and "://" in url:
        scheme = url.split("://", 1)[0].lower()
        if scheme not in _SCHEMES:
            raise ConfigurationError(
                f"no memory store for {scheme + '://'!r} in {redact(url)!r}; known store "
                "schemes: memory://, sqlite:// (stores on file:// and redis:// come later)"
            )
    parsed = parse_url(url, list(_SCHEMES))
    return SqliteStore.from_url_options(_sqlite_path(parsed), parsed.options, options, index)


def _sqlite_path(url: StorageURL) -> str:
    if url.scheme == "memory":
        if url.netloc or url.path not in ("", "/"):
            raise ConfigurationError(
                f"memory:// takes no host or path, got {url.raw!r}; write just 'memory://'"
            )
        return MEMORY
    if url.netloc:
        raise ConfigurationError(
            f"sqlite URLs have no host: {url.raw!r}; write sqlite:///relative/path.db "
            "or sqlite:////absolute/path.db"
        )
    # sqlite:///memory.db -> "memory.db" (relative); sqlite:////var/m.db -> "/var/m.db"
    path = url.path[1:] if url.path.startswith("/") else url.path
    if not path:
        raise ConfigurationError(
            f"sqlite URL {url.raw!r} names no file; write sqlite:///path/to/file.db "
            "(or memory:// for a store that lives only in this process)"
        )
    return path
