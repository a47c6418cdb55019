"""``Runner``: start, resume, fork and migrate threads of graphs named by reference.

A run records the graph's reference and its state schema version in the metadata of every
checkpoint it writes, so a thread can be resumed, forked or migrated knowing only its id.
Every operation that writes holds the thread's claim (``Checkpointer.claim_thread``) for
its whole duration, so two runners never advance one thread at once.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple
from langgraph.pregel import Pregel
from langgraph.types import Command
from pydantic import BaseModel

from statekeeper.checkpointers.base import Checkpointer
from statekeeper.errors import (
    AnswerRequiredError,
    ConfigurationError,
    NoPendingInterruptError,
    NothingToResumeError,
    StateValidationError,
    ThreadExistsError,
    ThreadNotFoundError,
)
from statekeeper.graphs._checkpoints import (
    FORKED_FROM_KEY,
    FORKED_FROM_THREAD_KEY,
    GRAPH_KEY,
    MIGRATED_FROM_KEY,
    VERSION_KEY,
    copy_history,
    metadata_reader,
    stored_values,
    thread_config,
    write_child,
    write_migrated,
)
from statekeeper.graphs._edits import edited_values, state_channels
from statekeeper.graphs._input import check_input
from statekeeper.graphs._interrupts import asked_before_fork, describe, one_asker, still_waiting
from statekeeper.graphs.loading import load_graph, state_saver, state_schema
from statekeeper.graphs.results import ForkResult, MigrationResult, RunResult
from statekeeper.graphs.state import VersionedState, validate
from statekeeper.threads import summarize

__all__ = ["NO_ANSWER", "Runner"]


class _NoAnswer:
    def __repr__(self) -> str:
        return "NO_ANSWER"


NO_ANSWER: Final[Any] = _NoAnswer()
"""The default of ``Runner.resume(answer=...)``: no answer (``None`` is an answer)."""


@dataclass(frozen=True)
class _Loaded:
    """A checkpoint loaded for a graph and its validated state. When the state was
    migrated, ``migration`` holds what recording it needs: the stored version, the
    current one, and the migrated values."""

    saved: CheckpointTuple
    state: BaseModel | dict[str, Any]
    migration: tuple[int, int, dict[str, Any]] | None = None


def _check_nodes(graph: Pregel[Any], ref: str, saved: CheckpointTuple, pending: Any) -> None:
    """Refuse to continue ``saved`` with a graph that lacks a node it waits to run
    (``pending``): LangGraph would skip that node without a word, and an answer given to
    its ``interrupt()`` would be spent on nothing."""
    # "?": a packet whose node could not be read; LangGraph itself decides about it
    missing = [n for n in dict.fromkeys(pending) if n != "?" and n not in graph.nodes]
    if not missing:
        return
    thread_id = saved.config["configurable"]["thread_id"]
    named = saved.metadata.get(GRAPH_KEY)
    hint = (
        f"it was run with {named!r}: use that graph"
        if isinstance(named, str) and named != ref
        else "use the graph that ran it"
    )
    raise ConfigurationError(
        f"graph {ref!r} has no node {', '.join(map(repr, missing))}, which thread "
        f"{thread_id!r} waits to run; {hint}"
    )


class Runner:
    """Runs graphs named ``"package.module:attr"`` on ``checkpointer``.

    ``unrecorded_version`` is the schema version assumed for checkpoints whose metadata
    records none: those written outside a runner (by ``graph.invoke`` directly).

    State is validated whenever it is loaded: when the graph's state schema is a
    :class:`VersionedState`, state stored under an older version is migrated first (on
    :meth:`resume`, :meth:`migrate` and :meth:`fork` the migration is recorded as a new
    checkpoint; the old ones are kept); any other pydantic schema is validated as is;
    other schemas (``TypedDict``...) are not validated when loaded. Whatever validating
    raises is a :class:`StateValidationError`. Edited values given to :meth:`fork` are
    checked against every kind of state schema.
    """

    def __init__(self, checkpointer: Checkpointer, *, unrecorded_version: int = 1) -> None:
        self._saver = checkpointer
        self._unrecorded_version = unrecorded_version

    # -- running ------------------------------------------------------------------------

    def run(self, graph_ref: str, input: Any, *, thread_id: str | None = None) -> RunResult:
        """Start a new thread (``thread_id``, or a new UUID) running ``graph_ref`` on
        ``input``, until it finishes or is interrupted.

        ``input`` is checked against the graph's input schema first
        (:func:`~statekeeper.graphs.check_input`), before the thread is claimed.

        Raises:
            InvalidInputError: ``input`` does not fit the graph's input schema; nothing
                was claimed, written or run.
            ThreadExistsError: the thread already has checkpoints; nothing was run.
            ThreadBusyError: another run holds the thread.
            GraphLoadError: the graph cannot be loaded.
            Exception: whatever a node raised; the thread keeps the checkpoints of the
                super-steps that completed, and :meth:`resume` continues from there.
        """
        thread_id = thread_id if thread_id is not None else str(uuid.uuid4())
        graph = load_graph(graph_ref, self._saver)
        check_input(graph, input, graph_ref=graph_ref)
        with self._saver.claim_thread(thread_id):
            if state_saver(graph).get_tuple(thread_config(thread_id)) is not None:
                raise ThreadExistsError(
                    f"thread {thread_id!r} already has checkpoints; resume it, fork it, or "
                    "run in a new thread"
                )
            return self._invoke(graph, graph_ref, thread_id, input)

    def resume(
        self, thread_id: str, *, answer: Any = NO_ANSWER, graph_ref: str | None = None
    ) -> RunResult:
        """Continue ``thread_id`` from its latest checkpoint: after a crash, a kill or an
        exception in a node, from the last completed super-step (nodes that completed are
        not run again); at a pending ``interrupt()``, with ``answer`` as its return value
        (several pending interrupts are answered with ``{interrupt_id: value}``).

        The graph is the one the thread's checkpoints name unless ``graph_ref`` is given.
        State stored under an older schema version is migrated first, and the migration
        is recorded as a new checkpoint before anything else is decided (so it stays even
        when the resume is then refused). The super-step a migration interrupted runs
        again from its start: its pending ``interrupt()`` is asked again, and ``answer``
        answers it.

        Raises:
            ThreadNotFoundError: the thread has no checkpoints.
            NothingToResumeError: the thread's run has finished.
            AnswerRequiredError: an ``interrupt()`` is waiting and no ``answer`` was given.
            NoPendingInterruptError: ``answer`` was given but no ``interrupt()`` waits.
            StateValidationError: the stored state is invalid or cannot be migrated;
                nothing was written or run.
            ThreadBusyError: another run holds the thread.
            ConfigurationError: no graph is known for the thread (pass ``graph_ref``),
                it cannot be loaded (``GraphLoadError``), or it has no node the thread
                waits to run (another graph's thread); nothing was run.
        """
        with self._saver.claim_thread(thread_id):
            graph, ref = self._graph_for(thread_id, None, graph_ref)
            # The graph reads only current state: LangGraph builds the next tasks' input
            # from it, even just to say which tasks are next.
            saved = self._record(graph, ref, self._load(graph, thread_id, None))
            # Decided from what is stored, as `statekeeper threads` decides it: a step
            # whose every task saved its writes before the next checkpoint was written
            # is unfinished, though LangGraph's snapshot then lists no `next` node.
            summary = summarize(saved)
            _check_nodes(graph, ref, saved, summary.next)
            if summary.finished:
                raise NothingToResumeError(
                    f"thread {thread_id!r} has finished: no task is left to run; fork it "
                    "from an earlier checkpoint to run part of it again"
                )
            waiting = still_waiting(state_saver(graph), saved, summary.interrupts)
            if answer is NO_ANSWER:
                if waiting:
                    raise AnswerRequiredError(
                        f"thread {thread_id!r} is waiting for an answer to "
                        f"{describe(waiting)}; resume it with an answer",
                        thread_id=thread_id,
                        interrupts=waiting,
                    )
                return self._invoke(graph, ref, thread_id, None)
            if not waiting:
                waiting = asked_before_fork(state_saver(graph), saved)
            if not waiting:
                raise NoPendingInterruptError(
                    f"thread {thread_id!r} is not waiting at an interrupt(), so there is "
                    f"nothing to answer; resume it without an answer to run "
                    f"{', '.join(summary.next)}",
                    thread_id=thread_id,
                )
            return self._invoke(graph, ref, thread_id, Command(resume=answer))

    def fork(
        self,
        thread_id: str,
        checkpoint_id: str,
        *,
        to_thread: str | None = None,
        graph_ref: str | None = None,
        values: Mapping[str, Any] | None = None,
    ) -> ForkResult:
        """Branch from ``checkpoint_id`` of ``thread_id`` (time travel): a copy of it
        becomes the latest checkpoint of ``to_thread`` (default: the same thread, where
        the later checkpoints are kept as history). Nothing runs: :meth:`resume` then
        runs the super-step after that checkpoint again, asking its ``interrupt()`` again.

        ``values`` (edited state) replace the copy's state values, all of them: fields
        left out are removed. Before anything is written, every key must be a channel of
        the graph's state (not ``__start__`` or another of LangGraph's own), and the
        values must fit the state schema: a pydantic model validates them as a whole
        (and they are recorded under its current schema version); a ``TypedDict`` or
        dataclass state's values are checked field by field, with pydantic's lax rules,
        and stored as given. No reducer is applied.

        Into another thread, the checkpoint's history (root graph only) is copied first,
        with the same checkpoint ids, so it can be inspected and forked there too. When
        the checkpoint's state is under an older schema version, the copy holds it
        migrated (its metadata records both, as for a migration).

        Raises:
            ThreadNotFoundError: the checkpoint does not exist.
            ThreadExistsError: ``to_thread`` is another thread that has checkpoints.
            StateValidationError: the checkpoint's state is invalid, or ``values`` are:
                a key is not a channel of the state, or a value does not fit its field
                (the error names it, in one line); nothing was written.
            ThreadBusyError: another run holds the target thread.
            ConfigurationError: no graph is known for the thread, it cannot be loaded,
                or it has no node the checkpoint waits to run; nothing was written.
        """
        target = to_thread if to_thread is not None else thread_id
        with self._saver.claim_thread(target):
            graph, ref = self._graph_for(thread_id, checkpoint_id, graph_ref)
            loaded = self._load(graph, thread_id, checkpoint_id)
            return self._fork(graph, ref, loaded, target, values)

    def fork_and_resume(
        self,
        thread_id: str,
        checkpoint_id: str,
        *,
        answer: Any = NO_ANSWER,
        to_thread: str | None = None,
        graph_ref: str | None = None,
    ) -> RunResult:
        """:meth:`fork` at ``checkpoint_id``, then run from the copy, under one claim of
        the target thread (no other run can slip in between): ``statekeeper resume
        --from`` and ``statekeeper fork --answer``.

        With ``answer``, the ``interrupt()`` that the super-step after the checkpoint
        asked, which runs again, returns ``answer``: a human's decision taken again
        differently, in one step. That is refused before anything is written when the
        step asked no ``interrupt()``, or when several of its tasks asked one (fork, then
        resume, and answer them by id).

        Raises:
            NoPendingInterruptError: ``answer`` was given, and the step after the
                checkpoint asked no ``interrupt()``; nothing was written.
            ConfigurationError: ``answer`` was given and several tasks asked; nothing
                was written. Or as for :meth:`fork`.
            ThreadNotFoundError, ThreadExistsError, StateValidationError,
            ThreadBusyError: as for :meth:`fork`.
            Exception: whatever a node raised, as for :meth:`resume`.
        """
        target = to_thread if to_thread is not None else thread_id
        with self._saver.claim_thread(target):
            graph, ref = self._graph_for(thread_id, checkpoint_id, graph_ref)
            loaded = self._load(graph, thread_id, checkpoint_id)
            if answer is not NO_ANSWER:
                one_asker(loaded.saved, thread_id)
            self._fork(graph, ref, loaded, target, None)
            run_input: Command[Any] | None = None if answer is NO_ANSWER else Command(resume=answer)
            return self._invoke(graph, ref, target, run_input)

    def _fork(
        self,
        graph: Pregel[Any],
        ref: str,
        loaded: _Loaded,
        target: str,
        values: Mapping[str, Any] | None,
    ) -> ForkResult:
        """The body of :meth:`fork`, with the target thread claimed."""
        source = loaded.saved
        _check_nodes(graph, ref, source, summarize(source).next)
        thread_id = source.config["configurable"]["thread_id"]
        checkpoint_id = source.checkpoint["id"]
        saver = cast(Checkpointer, state_saver(graph))  # a copy of self._saver
        metadata: dict[str, Any] = {
            "source": "fork",
            FORKED_FROM_KEY: checkpoint_id,
            GRAPH_KEY: ref,
        }
        fork_values: dict[str, Any] | None = None
        stored: dict[str, Any] = dict(source.metadata)
        if values is not None:
            fork_values = edited_values(
                graph, values, thread_id=thread_id, checkpoint_id=checkpoint_id
            )
            schema = state_schema(graph)
            if isinstance(schema, type) and issubclass(schema, VersionedState):
                metadata[VERSION_KEY] = schema.schema_version
        elif loaded.migration is not None:
            from_version, metadata[VERSION_KEY], fork_values = loaded.migration
            metadata[MIGRATED_FROM_KEY] = from_version
        if VERSION_KEY in stored and VERSION_KEY not in metadata:
            metadata[VERSION_KEY] = stored[VERSION_KEY]
        if target == thread_id:
            config = write_child(
                saver, source, config=source.config, metadata=metadata, values=fork_values
            )
        else:
            metadata[FORKED_FROM_THREAD_KEY] = thread_id
            config = self._fork_elsewhere(saver, source, target, metadata, fork_values)
        snapshot = graph.get_state(thread_config(target))
        return ForkResult(
            thread_id=target,
            checkpoint_id=config["configurable"]["checkpoint_id"],
            source_thread_id=thread_id,
            source_checkpoint_id=checkpoint_id,
            next=snapshot.next,
        )

    def _fork_elsewhere(
        self,
        saver: Checkpointer,
        source: CheckpointTuple,
        target: str,
        metadata: dict[str, Any],
        values: dict[str, Any] | None,
    ) -> RunnableConfig:
        if saver.get_tuple(thread_config(target)) is not None:
            raise ThreadExistsError(
                f"cannot fork into thread {target!r}: it already has checkpoints"
            )
        try:
            copied = copy_history(saver, source, target)
            return write_child(saver, source, config=copied, metadata=metadata, values=values)
        except BaseException:
            # The target was empty and is claimed: what is there is this fork's partial copy.
            saver.delete_thread(target)
            raise

    def migrate(self, thread_id: str, *, graph_ref: str | None = None) -> MigrationResult | None:
        """Migrate the latest checkpoint of ``thread_id`` to the graph's schema version
        without running anything; ``None`` when it is already current.

        Raises:
            ThreadNotFoundError, StateValidationError, ThreadBusyError,
            ConfigurationError: as for :meth:`resume`; nothing was written.
        """
        with self._saver.claim_thread(thread_id):
            graph, ref = self._graph_for(thread_id, None, graph_ref)
            loaded = self._load(graph, thread_id, None)
            if loaded.migration is None:
                return None
            saved = self._record(graph, ref, loaded)
            from_version, to_version, _ = loaded.migration
            return MigrationResult(thread_id, from_version, to_version, saved.checkpoint["id"])

    def state(
        self, thread_id: str, checkpoint_id: str | None = None, *, graph_ref: str | None = None
    ) -> BaseModel | dict[str, Any]:
        """The validated state at ``checkpoint_id`` (default: the latest) of
        ``thread_id``: an instance of the graph's state schema when it is a pydantic
        model (migrated to the current version in memory; nothing is written), else the
        stored values as a dict.

        Raises:
            ThreadNotFoundError: the thread or checkpoint does not exist.
            StateValidationError: the state is invalid or cannot be migrated.
            ConfigurationError: no graph is known for the thread, or it cannot be loaded.
        """
        graph, _ = self._graph_for(thread_id, checkpoint_id, graph_ref)
        return self._load(graph, thread_id, checkpoint_id).state

    # -- internals ------------------------------------------------------------------------

    def _graph_for(
        self, thread_id: str, checkpoint_id: str | None, graph_ref: str | None
    ) -> tuple[Pregel[Any], str]:
        """The graph to load the thread with: ``graph_ref``, else the one its checkpoint
        names (read without decoding its values: the graph's types are not imported yet)."""
        saved = self._get(metadata_reader(self._saver), thread_id, checkpoint_id)
        if graph_ref is not None:  # whatever it is: load_graph says what is wrong with it
            return load_graph(graph_ref, self._saver), graph_ref
        ref = saved.metadata.get(GRAPH_KEY)
        if not isinstance(ref, str):
            raise ConfigurationError(
                f"thread {thread_id!r} was not started by a statekeeper runner: its "
                "checkpoints do not name their graph; pass the graph reference "
                "('package.module:attr')"
            )
        return load_graph(ref, self._saver), ref

    def _get(
        self, saver: BaseCheckpointSaver[Any], thread_id: str, checkpoint_id: str | None
    ) -> CheckpointTuple:
        saved = saver.get_tuple(thread_config(thread_id, checkpoint_id))
        if saved is None:
            where = f"checkpoint {checkpoint_id!r} of " if checkpoint_id else ""
            raise ThreadNotFoundError(
                f"{where}thread {thread_id!r} does not exist in {self._saver!r}",
                thread_id=thread_id,
                checkpoint_id=checkpoint_id,
            )
        return saved

    def _load(self, graph: Pregel[Any], thread_id: str, checkpoint_id: str | None) -> _Loaded:
        """Load a checkpoint's state, migrated in memory and validated (nothing is
        written)."""
        saved = self._get(state_saver(graph), thread_id, checkpoint_id)
        schema = state_schema(graph)
        values, _ = stored_values(saved.checkpoint)
        cid = saved.checkpoint["id"]
        if not (isinstance(schema, type) and issubclass(schema, BaseModel)):
            return _Loaded(saved, values)
        if not issubclass(schema, VersionedState):
            return _Loaded(saved, validate(schema, values, thread_id=thread_id, checkpoint_id=cid))
        version = saved.metadata.get(VERSION_KEY, self._unrecorded_version)
        if not isinstance(version, int) or isinstance(version, bool):
            raise StateValidationError(
                f"checkpoint {cid!r} of thread {thread_id!r} records schema version "
                f"{version!r}, not an int",
                thread_id=thread_id,
                checkpoint_id=cid,
            )
        state, migrated = schema.load(
            values, version, thread_id=thread_id, checkpoint_id=cid, channels=state_channels(graph)
        )
        if version == schema.schema_version:
            return _Loaded(saved, state)
        return _Loaded(saved, state, (version, schema.schema_version, migrated))

    def _record(self, graph: Pregel[Any], ref: str, loaded: _Loaded) -> CheckpointTuple:
        """Record ``loaded``'s migration as a new checkpoint (child of the loaded one)
        and return it; without a migration, the loaded checkpoint."""
        if loaded.migration is None:
            return loaded.saved
        from_version, to_version, values = loaded.migration
        saver = state_saver(graph)
        config = write_migrated(
            saver,
            loaded.saved,
            values,
            graph_ref=ref,
            from_version=from_version,
            to_version=to_version,
        )
        thread_id = config["configurable"]["thread_id"]
        return self._get(saver, thread_id, config["configurable"]["checkpoint_id"])

    def _invoke(
        self,
        graph: Pregel[Any],
        ref: str,
        thread_id: str,
        input: Any,
    ) -> RunResult:
        schema = state_schema(graph)
        metadata: dict[str, Any] = {GRAPH_KEY: ref}
        if isinstance(schema, type) and issubclass(schema, VersionedState):
            metadata[VERSION_KEY] = schema.schema_version
        config: RunnableConfig = {**thread_config(thread_id), "metadata": metadata}
        # "sync": each checkpoint is stored before the next super-step starts, so a
        # process killed mid-step loses only that step.
        graph.invoke(input, config, durability="sync")
        snapshot = graph.get_state(thread_config(thread_id))
        return RunResult(
            thread_id=thread_id,
            status="interrupted" if snapshot.next else "done",
            interrupts=snapshot.interrupts,
            values=dict(snapshot.values),
            checkpoint_id=snapshot.config["configurable"]["checkpoint_id"],
            next=snapshot.next,
        )
