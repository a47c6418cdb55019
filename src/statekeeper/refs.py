"""Checkpoint references: the names people type for a checkpoint of a thread.

The CLI (``show``, ``diff``, ``fork``, ``resume --from``) and the inspector resolve them
here, so both read a reference the same way. Within one thread and namespace, a
reference is, first match wins:

``ID``
    a stored checkpoint id, whatever it holds (tried first, exactly);
``PREFIX``
    at least :data:`MIN_PREFIX` characters that begin exactly one checkpoint id
    (``history`` shows each id cut to such a prefix, :func:`short_ids`);
``@N``
    the checkpoint at step ``N`` (``@-1`` is a run's input checkpoint). A fork in place
    gives one step several checkpoints: the one on the current branch (the head and its
    ancestors) is meant; off it, a step is ambiguous unless it has only one;
``head``, ``latest``
    the newest checkpoint (as ``show`` without a reference);
``REF~N``
    the ``N``-th ancestor of ``REF`` (``~`` alone is ``~1``, the parent); the suffixes
    compose (``@5~2``, ``head~1~1``) and a bare ``~N`` starts from the head.

A reference that names no checkpoint is :class:`~statekeeper.errors.ThreadNotFoundError`
(with ``thread_id`` and, when the thread exists, ``checkpoint_id`` set to the
reference); one that names several is
:class:`~statekeeper.errors.AmbiguousReferenceError`, listing them; one that is not a
reference at all (too short, too long, control characters, ``@x``) is
:class:`~statekeeper.errors.InvalidIdError`. Resolving only reads: an exact id costs one
``get_tuple``; a prefix or a step lists the thread's checkpoints in the namespace once.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple

from statekeeper._storage.serde import skeleton_reader
from statekeeper.errors import (
    AmbiguousReferenceError,
    CorruptCheckpointError,
    InvalidIdError,
    ThreadNotFoundError,
)

__all__ = [
    "MAX_REF",
    "MIN_PREFIX",
    "SHORT_ID",
    "namespaces_text",
    "parent_id",
    "readable_checkpoints",
    "resolve_checkpoint",
    "short_ids",
    "thread_namespaces",
]

MIN_PREFIX = 4
"""The shortest id prefix a reference may be: fewer characters would name a checkpoint
by accident (a typo of ``@1`` as ``1``)."""

SHORT_ID = 8
"""The fewest characters :func:`short_ids` shows of an id."""

MAX_REF = 256
"""The longest reference read, in characters; a longer one is refused unread."""

_HEAD = frozenset({"head", "latest"})
_SHOWN_CANDIDATES = 5
_STEP = re.compile(r"@(-?[0-9]{1,18})")
_MOVES = re.compile(r"(?:~[0-9]{0,9})*")
# what changes how a terminal shows text: control, format (bidi), surrogates, separators
_UNSAFE = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def resolve_checkpoint(
    saver: BaseCheckpointSaver[Any], thread_id: str, ref: str, *, ns: str = ""
) -> CheckpointTuple:
    """The checkpoint of ``thread_id`` (namespace ``ns``) that ``ref`` names, as
    ``get_tuple`` returns it (with its pending writes). See the module docstring for
    the syntax.

    Raises:
        InvalidIdError: ``ref`` is not a reference (empty, longer than :data:`MAX_REF`,
            not valid unicode, holding control characters, a prefix shorter than
            :data:`MIN_PREFIX`, a malformed ``@N`` or ``~N``).
        AmbiguousReferenceError: several checkpoints match; ``candidates`` lists them.
        ThreadNotFoundError: the thread has no checkpoint in ``ns``, or none matches.
    """
    _check(ref)
    exact = saver.get_tuple(_config(thread_id, ns, ref))
    if exact is not None:
        return exact
    if any(unicodedata.category(char) in _UNSAFE for char in ref):
        raise InvalidIdError(
            f"checkpoint reference {_shown(ref)} holds control characters and is no stored "
            "id; type an id, a prefix of one, @STEP or ~N"
        )
    base, moves = _split(ref)
    found = _base(saver, thread_id, ns, ref, base)
    walked = {found.checkpoint["id"]}  # a parent met twice: stored links form a cycle
    for count in moves:
        for _ in range(count):
            if found.parent_config is None:
                raise _missing(saver, thread_id, ns, ref, f"{_short(found)} has no parent")
            parent = saver.get_tuple(found.parent_config)
            if parent is None:  # pruned: the stored history starts here
                raise _missing(saver, thread_id, ns, ref, f"the parent of {_short(found)} is gone")
            found = parent
            if found.checkpoint["id"] in walked:
                why = f"{_short(found)} is its own ancestor: its stored parent links form a cycle"
                raise _missing(saver, thread_id, ns, ref, why)
            walked.add(found.checkpoint["id"])
    return found


def readable_checkpoints(
    saver: BaseCheckpointSaver[Any], config: RunnableConfig
) -> tuple[list[CheckpointTuple], list[CorruptCheckpointError]]:
    """What ``saver.list(config)`` lists, newest first, past any damaged checkpoint: the
    listing goes on after a damaged one (``before`` its id), and the damage is returned
    beside the checkpoints, each once, so a thread with one bad record still shows the
    rest of its history.

    Raises:
        CorruptCheckpointError: damage the listing cannot get past (no checkpoint id,
            or the same one again: a backend that reads a whole log at once).
    """
    listed: list[CheckpointTuple] = []
    damaged: list[CorruptCheckpointError] = []
    before: RunnableConfig | None = None
    while True:
        try:
            for tup in saver.list(config, before=before):
                listed.append(tup)
            return listed, damaged
        except CorruptCheckpointError as exc:
            checkpoint_id = exc.checkpoint_id
            if not checkpoint_id or any(d.checkpoint_id == checkpoint_id for d in damaged):
                raise
            if listed and listed[-1].checkpoint["id"] <= checkpoint_id:
                raise  # not the newest-first order this walk relies on
            damaged.append(exc)
            before = {"configurable": {"checkpoint_id": checkpoint_id}}


def short_ids(ids: Iterable[str], *, minimum: int = SHORT_ID) -> dict[str, str]:
    """Each of ``ids`` cut to one length, the shortest (at least ``minimum``) at which
    they all differ, as git shortens commit ids: each short id is a prefix that
    :func:`resolve_checkpoint` reads back as its checkpoint, when ``ids`` are all the
    checkpoints of the thread and namespace. A cut that would end on ``-`` keeps one
    more character."""
    unique = sorted(set(ids))
    length = max(minimum, MIN_PREFIX)
    for before, after in itertools.pairwise(unique):
        common = 0
        for a, b in zip(before, after, strict=False):
            if a != b:
                break
            common += 1
        length = max(length, common + 1)
    shown = {}
    for full in unique:
        cut = full[:length]
        if cut.endswith("-") and len(full) > length:
            cut = full[: length + 1]
        shown[full] = cut
    return shown


def thread_namespaces(saver: BaseCheckpointSaver[Any], thread_id: str) -> list[str]:
    """The namespaces ``thread_id`` has checkpoints in, sorted (the root graph's ``""``
    first); listed without building the checkpoints' values."""
    listed = skeleton_reader(saver).list({"configurable": {"thread_id": thread_id}})
    return sorted({tup.config["configurable"].get("checkpoint_ns", "") for tup in listed})


def namespaces_text(namespaces: list[str], *, most: int = 5) -> str:
    """``namespaces`` for a message: ``'' (the root graph), 'sub:1'``, at most ``most``."""
    shown = ", ".join(repr(ns) if ns else "'' (the root graph)" for ns in namespaces[:most])
    more = f" and {len(namespaces) - most} more" if len(namespaces) > most else ""
    return shown + more


def parent_id(tup: CheckpointTuple) -> str | None:
    """The id of ``tup``'s parent checkpoint; ``None`` for a thread's first one."""
    parent = tup.parent_config
    if parent is None:
        return None
    found = parent.get("configurable", {}).get("checkpoint_id")
    return found if isinstance(found, str) else None


# -- internals ----------------------------------------------------------------------------


def _check(ref: object) -> None:
    if not isinstance(ref, str) or not ref:
        raise InvalidIdError("a checkpoint reference must be non-empty text")
    if len(ref) > MAX_REF:
        raise InvalidIdError(
            f"a checkpoint reference is at most {MAX_REF} characters, got {len(ref)}"
        )
    try:
        ref.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidIdError(
            "a checkpoint reference must be valid unicode text (it holds a lone surrogate)"
        ) from None


def _split(ref: str) -> tuple[str, list[int]]:
    """``ref`` as its base and the ``~N`` moves after it."""
    base, tilde, rest = ref.partition("~")
    moves = tilde + rest
    if not _MOVES.fullmatch(moves):
        if re.fullmatch(r"(?:~[0-9]*)*", moves):
            raise InvalidIdError(
                f"checkpoint reference {_shown(ref)}: the count after ~ is too large "
                "(N in ~N has at most 9 digits)"
            )
        raise InvalidIdError(
            f"checkpoint reference {_shown(ref)}: after the first ~ only ~N may follow "
            "(~ alone is ~1, the parent)"
        )
    counts = [int(part) if part else 1 for part in moves.split("~")[1:]]
    return base, counts


def _base(
    saver: BaseCheckpointSaver[Any], thread_id: str, ns: str, ref: str, base: str
) -> CheckpointTuple:
    if not base or base.casefold() in _HEAD:
        head = saver.get_tuple(_config(thread_id, ns))
        if head is None:
            raise _no_thread(thread_id, ns)
        return head
    if base.startswith("@"):
        step = _STEP.fullmatch(base)
        if step is None:
            if re.fullmatch(r"@-?[0-9]+", base):
                raise InvalidIdError(
                    f"checkpoint reference {_shown(ref)}: the step is out of range (a step "
                    "has at most 18 digits)"
                )
            raise InvalidIdError(
                f"checkpoint reference {_shown(ref)}: a step is @ and a whole number "
                "(@0, @12, @-1 for the input)"
            )
        return _at_step(saver, thread_id, ns, ref, int(step.group(1)))
    if len(base) < MIN_PREFIX:
        raise InvalidIdError(
            f"checkpoint reference {_shown(ref)} is too short: an id prefix needs at least "
            f"{MIN_PREFIX} characters (or use @STEP, ~N)"
        )
    listed, damaged = _listing(saver, thread_id, ns)
    matches = [tup for tup in listed if tup.checkpoint["id"].startswith(base)]
    broken = [exc for exc in damaged if str(exc.checkpoint_id or "").startswith(base)]
    if len(matches) == 1 and not broken:
        return _whole(saver, thread_id, ns, ref, matches[0])
    if not matches:
        if len(broken) == 1:
            raise broken[0]  # the checkpoint it names is damaged: say so, not "no such"
        why = "no checkpoint id starts with it" + _unread(damaged)
        raise _missing(saver, thread_id, ns, ref, why, listed)
    why = f"{len(matches) + len(broken)} checkpoint ids start with it"
    raise _ambiguous(ref, thread_id, why + (f" ({len(broken)} damaged)" if broken else ""), matches)


def _at_step(
    saver: BaseCheckpointSaver[Any], thread_id: str, ns: str, ref: str, step: int
) -> CheckpointTuple:
    listed, damaged = _listing(saver, thread_id, ns)
    matches = [tup for tup in listed if tup.metadata.get("step") == step]
    if len(matches) == 1:
        return _whole(saver, thread_id, ns, ref, matches[0])
    if not matches:
        steps = [s for tup in listed if isinstance(s := tup.metadata.get("step"), int)]
        known = f"steps {min(steps)} to {max(steps)}" if steps else "no steps recorded"
        why = f"no checkpoint at step {step}; the thread has {known}{_unread(damaged)}"
        raise _missing(saver, thread_id, ns, ref, why, listed)
    on_branch = _branch(listed)
    chosen = [tup for tup in matches if tup.checkpoint["id"] in on_branch]
    if len(chosen) == 1:
        return _whole(saver, thread_id, ns, ref, chosen[0])
    raise _ambiguous(
        ref, thread_id, f"{len(matches)} checkpoints at step {step}, none on the current branch",
        matches,
    )  # fmt: skip


def _branch(listed: list[CheckpointTuple]) -> set[str]:
    """The ids of the current branch: the newest checkpoint and its stored ancestors."""
    by_id: Mapping[str, CheckpointTuple] = {tup.checkpoint["id"]: tup for tup in listed}
    if not listed:
        return set()
    newest = max(by_id)  # LangGraph's ids grow with time; not every saver lists newest first
    seen: set[str] = set()
    current: str | None = newest
    while current is not None and current in by_id and current not in seen:
        seen.add(current)
        current = parent_id(by_id[current])
    return seen


def _listing(
    saver: BaseCheckpointSaver[Any], thread_id: str, ns: str
) -> tuple[list[CheckpointTuple], list[CorruptCheckpointError]]:
    """The thread's readable checkpoints, read without building their values
    (:func:`~statekeeper._storage.serde.skeleton_reader`: a reference needs their ids,
    parents and metadata), and the damage met listing them: a damaged checkpoint is no
    match for a step (its metadata cannot be read); a prefix that names one raises its
    damage."""
    listed, damaged = readable_checkpoints(skeleton_reader(saver), _config(thread_id, ns))
    if not listed:
        if damaged:
            raise damaged[0]
        raise _no_thread(thread_id, ns)
    return listed, damaged


def _whole(
    saver: BaseCheckpointSaver[Any], thread_id: str, ns: str, ref: str, found: CheckpointTuple
) -> CheckpointTuple:
    """The checkpoint a listing ``found``, read again with its values."""
    whole = saver.get_tuple(_config(thread_id, ns, found.checkpoint["id"]))
    if whole is None:  # deleted since it was listed
        raise _missing(saver, thread_id, ns, ref, f"{_short(found)} was deleted meanwhile")
    return whole


def _unread(damaged: list[CorruptCheckpointError]) -> str:
    """What a "not found" leaves unsearched: the damaged checkpoints, if any."""
    if not damaged:
        return ""
    count = f"{len(damaged)} checkpoint{'s' if len(damaged) != 1 else ''}"
    return f" (and {count} that cannot be read: damaged; `verify` lists them)"


def _config(thread_id: str, ns: str, checkpoint_id: str | None = None) -> Any:
    configurable = {"thread_id": thread_id, "checkpoint_ns": ns}
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def _no_thread(thread_id: str, ns: str) -> ThreadNotFoundError:
    where = f" in namespace {ns!r}" if ns else ""
    return ThreadNotFoundError(f"no thread {thread_id!r}{where}", thread_id=thread_id)


def _missing(
    saver: BaseCheckpointSaver[Any],
    thread_id: str,
    ns: str,
    ref: str,
    why: str,
    listed: list[CheckpointTuple] | None = None,
) -> ThreadNotFoundError:
    """No checkpoint for ``ref``; a missing thread is said as such."""
    if listed is None and saver.get_tuple(_config(thread_id, ns)) is None:
        return _no_thread(thread_id, ns)
    return ThreadNotFoundError(
        f"no checkpoint {_shown(ref)} in thread {thread_id!r}: {why}",
        thread_id=thread_id,
        checkpoint_id=ref,
        reason=why,
    )


def _ambiguous(
    ref: str, thread_id: str, why: str, matches: list[CheckpointTuple]
) -> AmbiguousReferenceError:
    ids = sorted((tup.checkpoint["id"] for tup in matches), reverse=True)
    steps = {tup.checkpoint["id"]: tup.metadata.get("step") for tup in matches}
    short = short_ids(ids)
    listed = ", ".join(f"{short[i]} (step {steps[i]})" for i in ids[:_SHOWN_CANDIDATES])
    more = f" and {len(ids) - _SHOWN_CANDIDATES} more" if len(ids) > _SHOWN_CANDIDATES else ""
    return AmbiguousReferenceError(
        f"checkpoint reference {_shown(ref)} is ambiguous in thread {thread_id!r}: {why}: "
        f"{listed}{more}; type more of the id",
        reference=ref,
        candidates=tuple(ids),
    )


def _short(tup: CheckpointTuple) -> str:
    return f"checkpoint {tup.checkpoint['id']!r} (step {tup.metadata.get('step')})"


def _shown(ref: str, width: int = 40) -> str:
    text = repr(ref)
    return text if len(text) <= width else text[: width - 1] + "…"
