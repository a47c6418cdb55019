"""What every statekeeper memory store shares: options, validation, embeddings, the sync
and async API. A backend only runs a checked, encoded batch (:meth:`MemoryStore._run`).

Times are Unix seconds read once per batch (:func:`clock`), so every operation of a batch
sees the same instant: an item expired for one of them is expired for all.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, ClassVar, Literal, Self

from langchain_core.embeddings import Embeddings
from langgraph.store.base import (
    NOT_PROVIDED,
    BaseStore,
    GetOp,
    IndexConfig,
    Item,
    ListNamespacesOp,
    NamespacePath,
    NotProvided,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    ensure_embeddings,
)

from statekeeper.errors import ConfigurationError
from statekeeper.memory.embeddings import as_embeddings, check_dims
from statekeeper.memory.notes import NOTE_KIND
from statekeeper.memory.store import checks, lexical
from statekeeper.memory.store.search import Fusion
from statekeeper.memory.store.values import (
    Fields,
    encode_value,
    indexed_texts,
    pack_vector,
    parse_fields,
    unpack_vector,
)

__all__ = ["MemoryStore", "Plan", "Step", "Write", "clock", "stamp"]


def clock() -> float:
    """Now, in Unix seconds: the one clock of every store's stamps and expiry."""
    return time.time()


def stamp(now: float) -> str:
    """``now`` as a stored timestamp: ISO 8601 in UTC, fixed width (32 characters), so
    text order is time order."""
    return datetime.fromtimestamp(now, UTC).isoformat(timespec="microseconds")


@dataclass(frozen=True)
class Write:
    """A put or delete, validated and encoded before any lock is taken."""

    namespace: tuple[str, ...]
    key: str
    value: str | None  # the value as JSON; None deletes the item
    ttl: float | None  # minutes
    terms: tuple[str, ...]  # normalised terms of the indexed text, repeats kept
    vectors: tuple[tuple[str, bytes], ...]  # (path, packed embedding)


Step = Write | GetOp | SearchOp | ListNamespacesOp


@dataclass
class Plan:
    """A batch ready to run: puts encoded, and the texts and queries to embed."""

    steps: list[Step] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)  # every put's indexed texts, in order
    to_embed: list[tuple[int, tuple[str, ...]]] = field(default_factory=list)  # step, paths
    queries: list[str] = field(default_factory=list)  # distinct non-blank queries
    query_vectors: dict[str, tuple[float, ...]] = field(default_factory=dict)

    @property
    def wants_embeddings(self) -> bool:
        return bool(self.texts or self.queries)

    @property
    def writes(self) -> list[Write]:
        return [step for step in self.steps if isinstance(step, Write)]

    def embedded(
        self,
        documents: Sequence[Sequence[float]],
        queries: Sequence[Sequence[float]],
        dims: int | None,
    ) -> Plan:
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


class MemoryStore(BaseStore):
    """A LangGraph store whose search scores are the normalised relevance of
    ``docs/memory-store.md``. Subclasses run checked batches (:meth:`_run`), delete
    expired items (:meth:`_sweep`) and close (:meth:`close`).

    Guarantees of every subclass: operations run in order, a later one seeing an earlier
    one; a batch is validated (values, keys, namespaces, filters, embeddings: the rules of
    :mod:`~statekeeper.memory.store.checks`) before its first write, so a refused batch
    writes nothing; values are stored as JSON and come back equal; namespaces and keys of
    any unicode text are stored and matched exactly.
    One object serves the sync and async APIs from any thread.
    """

    supports_ttl: bool = True
    #: Search scores are the normalised relevance of ``docs/memory-store.md``: recall
    #: trusts them as they are instead of scoring the items again.
    relevance_scores: ClassVar[bool] = True

    def __init__(
        self,
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        semantic_weight: float = 0.5,
    ) -> None:
        self.semantic_weight = checks.weight(semantic_weight)
        self.ttl_config = checks.ttl_config(ttl)
        self.embeddings, self._dims, self._fields = _check_index(index)
        self.index_config = dict(index) if index is not None else None
        # a model may say what cosine unrelated texts reach with it, and how much lexical
        # evidence its similarity needs to mean something (StaticEmbeddings does)
        floor = getattr(self.embeddings, "similarity_floor", None)
        support = getattr(self.embeddings, "lexical_support", 0.0)
        self.fusion = Fusion(
            semantic_weight,
            floor if isinstance(floor, float) else None,
            support if isinstance(support, float) else 0.0,
        )

    def close(self) -> None:
        """Release the storage. Idempotent; later calls raise StorageError."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # BaseStore's methods turn a key into text (None into "None") and iterate a namespace
    # before batching: these check both first (checks.namespace, checks.key), then let it.

    def put(
        self,
        namespace: tuple[str, ...],
        key: str,
        value: Mapping[str, Any],
        index: Literal[False] | list[str] | None = None,
        *,
        ttl: float | NotProvided | None = NOT_PROVIDED,
    ) -> None:
        super().put(checks.namespace(namespace), checks.key(key), value, index, ttl=ttl)

    async def aput(
        self,
        namespace: tuple[str, ...],
        key: str,
        value: Mapping[str, Any],
        index: Literal[False] | list[str] | None = None,
        *,
        ttl: float | NotProvided | None = NOT_PROVIDED,
    ) -> None:
        ns, checked = checks.namespace(namespace), checks.key(key)
        await super().aput(ns, checked, value, index, ttl=ttl)

    def get(self, namespace: tuple[str, ...], key: str, **options: Any) -> Item | None:
        return super().get(checks.namespace(namespace), checks.key(key), **options)

    async def aget(self, namespace: tuple[str, ...], key: str, **options: Any) -> Item | None:
        return await super().aget(checks.namespace(namespace), checks.key(key), **options)

    def delete(self, namespace: tuple[str, ...], key: str) -> None:
        super().delete(checks.namespace(namespace), checks.key(key))

    async def adelete(self, namespace: tuple[str, ...], key: str) -> None:
        await super().adelete(checks.namespace(namespace), checks.key(key))

    def search(self, namespace_prefix: tuple[str, ...], /, **options: Any) -> list[SearchItem]:
        prefix = checks.namespace(namespace_prefix, "namespace prefix")
        return super().search(prefix, **options)

    async def asearch(
        self, namespace_prefix: tuple[str, ...], /, **options: Any
    ) -> list[SearchItem]:
        prefix = checks.namespace(namespace_prefix, "namespace prefix")
        return await super().asearch(prefix, **options)

    def list_namespaces(
        self,
        *,
        prefix: NamespacePath | None = None,
        suffix: NamespacePath | None = None,
        **options: Any,
    ) -> list[tuple[str, ...]]:
        prefix, suffix = _paths(prefix, suffix)
        return super().list_namespaces(prefix=prefix, suffix=suffix, **options)

    async def alist_namespaces(
        self,
        *,
        prefix: NamespacePath | None = None,
        suffix: NamespacePath | None = None,
        **options: Any,
    ) -> list[tuple[str, ...]]:
        prefix, suffix = _paths(prefix, suffix)
        return await super().alist_namespaces(prefix=prefix, suffix=suffix, **options)

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` in order; results in the same order."""
        plan = self._plan(ops)
        if self.embeddings is None or not plan.wants_embeddings:
            return self._run(plan, clock())
        documents = self.embeddings.embed_documents(plan.texts) if plan.texts else []
        queries = [self.embeddings.embed_query(q) for q in plan.queries]
        return self._run(plan.embedded(documents, queries, self._dims), clock())

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """:meth:`batch` for asyncio: embeddings are awaited, the storage work runs in a
        worker thread (the same code as :meth:`batch`), so the event loop never waits."""
        plan = self._plan(ops)
        if self.embeddings is not None and plan.wants_embeddings:
            documents = await self.embeddings.aembed_documents(plan.texts) if plan.texts else []
            queries = [await self.embeddings.aembed_query(q) for q in plan.queries]
            plan = plan.embedded(documents, queries, self._dims)
        return await asyncio.to_thread(lambda: self._run(plan, clock()))

    def sweep_ttl(self) -> int:
        """Delete every expired item now; return how many."""
        return self._sweep(clock())

    def _run(self, plan: Plan, now: float) -> list[Result]:
        raise NotImplementedError

    def _sweep(self, now: float) -> int:
        raise NotImplementedError

    def _plan(self, ops: Iterable[Op]) -> Plan:
        # Validation and encoding happen here, before any lock is taken.
        plan = Plan()
        for op in checks.check_ops(ops):
            if isinstance(op, PutOp):
                plan.steps.append(self._write(op, plan))
                continue
            query = op.query if isinstance(op, SearchOp) else None
            if query and query.strip() and query not in plan.queries:
                plan.queries.append(query)
            assert isinstance(op, GetOp | SearchOp | ListNamespacesOp)
            plan.steps.append(op)
        return plan

    def _write(self, op: PutOp, plan: Plan) -> Write:
        # op passed checks.check_op
        if op.value is None:
            return Write(op.namespace, op.key, None, None, (), ())
        value = encode_value(op.value)
        texts: list[tuple[str, str]] = []
        fields: Fields | None = None
        if op.index is not False:
            fields = self._fields if op.index is None else parse_fields(op.index)
            texts = indexed_texts(op.value, fields)
        terms = tuple(lexical.terms("\n".join(text for _, text in texts)))
        if fields is None and op.value.get("kind") == NOTE_KIND:
            # A note's meaning is its text: its topics (names, dates, rare words) are
            # single words whose vectors would match anything near them.
            texts = [(path, text) for path, text in texts if path == "text"]
        plan.to_embed.append((len(plan.steps), tuple(path for path, _ in texts)))
        plan.texts.extend(text for _, text in texts)
        return Write(op.namespace, op.key, value, op.ttl, terms, ())


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
    embed = as_embeddings(index.get("embed"))
    if embed is None:
        return None, dims, fields
    try:
        return ensure_embeddings(embed), check_dims(dims, embed), fields
    except ValueError as exc:
        raise ConfigurationError(f"cannot use the index's embed: {exc}") from exc


def _paths(
    prefix: NamespacePath | None, suffix: NamespacePath | None
) -> tuple[NamespacePath | None, NamespacePath | None]:
    """list_namespaces' ``prefix`` and ``suffix``, checked (``*`` is one label)."""
    return (
        None if prefix is None else checks.namespace(prefix, "namespace prefix"),
        None if suffix is None else checks.namespace(suffix, "namespace suffix"),
    )
