"""Contradictions between notes: what happens when a note about a fact already noted is written.

Two notes contradict when they are values of one fact: the same normalised ``(subject,
attribute)`` key ("ana", "home"), which the summarizer extracts (see
:attr:`~statekeeper.memory.notes.Note.fact`). Notes without a key never conflict. When
:func:`write_notes` writes a note, the stored notes of its fact whose validity overlaps
it (or that start later) are judged by a :class:`ConflictPolicy`, one pair at a time:

- :class:`LatestWins` (the default): of the two, the note that starts holding later
  supersedes the other. The older one is kept and linked (``superseded_by``, and the
  newer one's ``supersedes``), and its ``valid_to`` becomes the newer one's
  ``valid_from``, so recall hides it except with an ``as_of`` in its validity window.
- :class:`KeepBothFlagged`: both hold; each lists the other in ``conflicts_with``, and
  recall marks them (``Hit.conflicts``).
- :class:`ModelJudgedPolicy`: a chat model says whether the two really contradict; if
  they do, another policy (``LatestWins`` by default) resolves them, else both stand.

Nothing is ever deleted: policies only set validity and links. :func:`supersede_chain`
follows the links.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator, Sequence
from typing import Literal, Protocol, runtime_checkable

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage, SystemMessage
from langgraph.store.base import BaseStore, PutOp

from statekeeper.errors import ConfigurationError, SerializationError
from statekeeper.memory.notes import NOTE_KIND, Note

__all__ = [
    "ConflictPolicy",
    "KeepBothFlagged",
    "LatestWins",
    "ModelJudgedPolicy",
    "PolicyName",
    "Verdict",
    "resolve_policy",
    "supersede_chain",
    "write_note",
    "write_notes",
]

logger = logging.getLogger(__name__)

Verdict = Literal["supersede", "flag", "keep"]
"""What to do with two notes of one fact: the later-starting one ``"supersede"``\\ s the
other; ``"flag"`` both as conflicting; ``"keep"`` both as they are (no contradiction)."""

PolicyName = Literal["latest_wins", "keep_both_flagged"]

_PAGE = 100  # notes per request when a fact's notes are read page by page


@runtime_checkable
class ConflictPolicy(Protocol):
    """Decides what two notes with the same ``(subject, attribute)`` key are to each other.

    ``judge(note, other)`` gets the note being written and a stored note of the same fact
    (which may start holding before or after it) and returns a :data:`Verdict`. It must
    not have side effects on the store: :func:`write_notes` applies the verdicts.
    """

    @property
    def name(self) -> str: ...

    def judge(self, note: Note, other: Note) -> Verdict: ...


class LatestWins:
    """The later-starting note supersedes the other: one current value per fact."""

    name = "latest_wins"

    def judge(self, note: Note, other: Note) -> Verdict:
        return "supersede"

    def __repr__(self) -> str:
        return "LatestWins()"


class KeepBothFlagged:
    """Both notes stand, each marked as conflicting with the other."""

    name = "keep_both_flagged"

    def judge(self, note: Note, other: Note) -> Verdict:
        return "flag"

    def __repr__(self) -> str:
        return "KeepBothFlagged()"


JUDGE_PROMPT = """\
You keep a memory of facts about people. You are given two notes about the same subject \
and attribute, each with the date it was said. Decide whether they contradict each other: \
whether both cannot be true at the same time (a new home city replaces the old one; a \
second pet does not replace the first).

Answer with one JSON object and nothing else: {"contradicts": true} or {"contradicts": false}"""

_FENCE = re.compile(r"^\s*```(?:json)?\s*|\s*```\s*$")


class ModelJudgedPolicy:
    """Asks a chat model whether two notes of one fact contradict each other.

    The model gets ``prompt`` and the two notes (text, subject, attribute, when said) and
    must answer ``{"contradicts": true|false}`` (a fenced code block is accepted). If they
    contradict, ``then`` decides (:class:`LatestWins` by default); if not, both stand
    unlinked. When the answer is not that JSON, the key rule applies, ``then``'s verdict,
    and a warning is logged. Errors of the model call itself propagate.
    """

    def __init__(
        self,
        model: BaseChatModel,
        *,
        then: ConflictPolicy | None = None,
        prompt: str = JUDGE_PROMPT,
    ) -> None:
        self.model = model
        self.then: ConflictPolicy = then if then is not None else LatestWins()
        self.prompt = prompt

    @property
    def name(self) -> str:
        """``"model_judged:<then's name>"``."""
        return f"model_judged:{self.then.name}"

    def judge(self, note: Note, other: Note) -> Verdict:
        reply = self.model.invoke([SystemMessage(self.prompt), HumanMessage(_pair(other, note))])
        answer = _contradicts(reply.text)
        if answer is None:
            logger.warning(
                'the model\'s answer is not {"contradicts": true|false}: %r; judging by '
                "the key with %s",
                reply.text[:80],
                self.then.name,
            )
            return self.then.judge(note, other)
        return self.then.judge(note, other) if answer else "keep"

    def __repr__(self) -> str:
        return f"ModelJudgedPolicy({self.model!r}, then={self.then!r})"


def _pair(first: Note, second: Note) -> str:
    lines = []
    for label, note in (("A", first), ("B", second)):
        lines.append(
            f"Note {label} (said {note.observed_at.date().isoformat()}, about "
            f"{note.subject} / {note.attribute}): {note.text}"
        )
    return "\n".join(lines)


def _contradicts(content: str) -> bool | None:
    body = _FENCE.sub("", content)
    start, end = body.find("{"), body.rfind("}")
    if start < 0 or end < start:
        return None
    try:
        answer = json.loads(body[start : end + 1])
    except json.JSONDecodeError:
        return None
    verdict = answer.get("contradicts") if isinstance(answer, dict) else None
    return verdict if isinstance(verdict, bool) else None


def resolve_policy(policy: ConflictPolicy | PolicyName) -> ConflictPolicy:
    """A policy given by name (``"latest_wins"``, ``"keep_both_flagged"``) or as is.

    Raises:
        ConfigurationError: an unknown name, or not a :class:`ConflictPolicy`.
    """
    if policy == "latest_wins":
        return LatestWins()
    if policy == "keep_both_flagged":
        return KeepBothFlagged()
    if isinstance(policy, str) or not isinstance(policy, ConflictPolicy):
        raise ConfigurationError(
            f"a conflict policy is 'latest_wins', 'keep_both_flagged' or a ConflictPolicy, "
            f"not {policy!r}"
        )
    return policy


def write_note(
    store: BaseStore,
    namespace: tuple[str, ...],
    note: Note,
    *,
    policy: ConflictPolicy | PolicyName = "latest_wins",
) -> Note:
    """Write one note with ``policy``; see :func:`write_notes`. Returns it as stored."""
    return write_notes(store, namespace, [note], policy=policy)[0]


def write_notes(
    store: BaseStore,
    namespace: tuple[str, ...],
    notes: Sequence[Note],
    *,
    policy: ConflictPolicy | PolicyName = "latest_wins",
) -> list[Note]:
    """Write ``notes`` under ``namespace`` (each under its :attr:`~Note.key`), in order,
    resolving contradictions with the notes of the same fact already there (or written
    earlier in the call) with ``policy``; return the notes as stored.

    Guarantees:

    - Nothing is deleted: policies only set ``valid_to`` and the links
      (``superseded_by``, ``supersedes``, ``conflicts_with``) of the notes involved.
    - Idempotent: a note whose key is already stored is written again keeping the stored
      validity and links, and is not judged again (a retried step changes nothing).
    - Order-independent for :class:`LatestWins`: a note that starts holding before the
      current one of its fact is inserted into the chain where it belongs (superseded by
      the next, superseding the one it interrupts).
    - One ``store.batch`` of puts: atomic on a store whose batches are (statekeeper's).
      Session notes (``unit="session"``) are put with ``index=False``: recall finds them
      by their time, and their topics stay out of the statements' scores.

    Only notes in ``namespace`` itself are compared, not in its sub-namespaces. The
    policy is consulted for every stored note of the fact that holds at some time the
    new one does, or starts after it.

    Raises:
        ConfigurationError: ``policy`` is not a policy.
    """
    judge = resolve_policy(policy)
    pending: dict[str, Note] = {}
    for note in notes:
        stored = pending.get(note.key) or _get(store, namespace, note.key)
        if stored is not None:
            pending[note.key] = _with_links_of(note, stored)
        elif note.fact is None:
            pending[note.key] = note
        else:
            _place(note, _fact_notes(store, namespace, note, pending), judge, pending)
    if pending:
        # a session note is found by its time, not its words: indexed, its many topics
        # would weigh on the scores of the statements it sums up
        store.batch(
            [
                PutOp(
                    namespace, key, note.to_value(), index=False if note.unit == "session" else None
                )
                for key, note in pending.items()
            ]
        )
    return [pending[note.key] for note in notes]


def _place(note: Note, others: list[Note], judge: ConflictPolicy, pending: dict[str, Note]) -> None:
    """Judge ``note`` against the other notes of its fact and record every note changed."""
    ends = note.valid_to
    rivals = [
        other
        for other in others
        if (other.valid_to is None or other.valid_to > note.valid_from)
        and (ends is None or other.valid_from < ends)
    ]
    verdicts = [(other, judge.judge(note, other)) for other in rivals]
    for other, verdict in verdicts:
        if verdict == "flag":
            pending[other.key] = _link(other, conflicts_with=note.key)
            note = _link(note, conflicts_with=other.key)
    superseding = [other for other, verdict in verdicts if verdict == "supersede"]
    # ties go to the note being written: the one said later in the conversation
    earlier = [other for other in superseding if other.valid_from <= note.valid_from]
    later = sorted(
        (other for other in superseding if other.valid_from > note.valid_from),
        key=lambda other: (other.valid_from, other.provenance.created_at),
    )
    for other in earlier:
        pending[other.key] = other.model_copy(
            update={"valid_to": note.valid_from, "superseded_by": note.key}
        )
        note = _link(note, supersedes=other.key)
    if later:
        successor = later[0]
        replaced = {other.key for other in earlier if other.superseded_by == successor.key}
        pending[successor.key] = successor.model_copy(
            update={
                "supersedes": (
                    *(k for k in successor.supersedes if k not in replaced),
                    note.key,
                )
            }
        )
        note = note.model_copy(
            update={"valid_to": successor.valid_from, "superseded_by": successor.key}
        )
    pending[note.key] = note


def _link(note: Note, *, supersedes: str | None = None, conflicts_with: str | None = None) -> Note:
    update: dict[str, tuple[str, ...]] = {}
    if supersedes is not None and supersedes not in note.supersedes:
        update["supersedes"] = (*note.supersedes, supersedes)
    if conflicts_with is not None and conflicts_with not in note.conflicts_with:
        update["conflicts_with"] = (*note.conflicts_with, conflicts_with)
    return note.model_copy(update=update) if update else note


def _with_links_of(note: Note, stored: Note) -> Note:
    return note.model_copy(
        update={
            "valid_to": stored.valid_to,
            "superseded_by": stored.superseded_by,
            "supersedes": tuple(dict.fromkeys((*stored.supersedes, *note.supersedes))),
            "conflicts_with": tuple(dict.fromkeys((*stored.conflicts_with, *note.conflicts_with))),
        }
    )


def _fact_notes(
    store: BaseStore, namespace: tuple[str, ...], note: Note, pending: dict[str, Note]
) -> list[Note]:
    """The other notes of ``note``'s fact in ``namespace``: stored, as updated in
    ``pending``, and the pending ones not stored yet."""
    found = {other.key: other for other in _stored_fact_notes(store, namespace, note)}
    for key, other in pending.items():
        if other.fact == note.fact:
            found[key] = other
    found.pop(note.key, None)
    return list(found.values())


def _stored_fact_notes(store: BaseStore, namespace: tuple[str, ...], note: Note) -> Iterator[Note]:
    conditions = {"kind": NOTE_KIND, "subject": note.subject, "attribute": note.attribute}
    offset = 0
    while True:
        page = store.search(namespace, filter=conditions, limit=_PAGE, offset=offset)
        for item in page:
            if tuple(item.namespace) == namespace and (other := _read(item.value)) is not None:
                yield other
        if len(page) < _PAGE:
            return
        offset += _PAGE


def _get(store: BaseStore, namespace: tuple[str, ...], key: str) -> Note | None:
    item = store.get(namespace, key)
    return _read(item.value) if item is not None else None


def _read(value: object) -> Note | None:
    try:
        return Note.from_value(value) if isinstance(value, dict) else None
    except SerializationError:
        return None  # not a note, or one this statekeeper cannot read: never linked


def supersede_chain(store: BaseStore, namespace: tuple[str, ...], key: str) -> list[Note]:
    """The supersede chain through the note stored under ``key``, oldest to newest: the
    notes it replaced (transitively, through ``supersedes``), itself, then the notes that
    replaced it (through ``superseded_by``), ordered by ``valid_from`` then creation.
    ``[note]`` for a note never superseded; ``[]`` when no note is stored under ``key``.
    A link to a note no longer readable ends the chain there."""
    start = _get(store, namespace, key)
    if start is None:
        return []
    chain = {key: start}
    backward = list(start.supersedes)
    while backward:
        older_key = backward.pop()
        if older_key not in chain and (older := _get(store, namespace, older_key)) is not None:
            chain[older_key] = older
            backward.extend(older.supersedes)
    newer_key = start.superseded_by
    while newer_key is not None and newer_key not in chain:
        newer = _get(store, namespace, newer_key)
        if newer is None:
            break
        chain[newer_key] = newer
        newer_key = newer.superseded_by
    return sorted(chain.values(), key=lambda note: (note.valid_from, note.provenance.created_at))
