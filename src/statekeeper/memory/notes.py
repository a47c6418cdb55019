"""Memory notes and their provenance: what every part of :mod:`statekeeper.memory` shares.

A note is a short text distilled from conversation messages, stored in a LangGraph
``BaseStore`` as a plain JSON value (so any store, any serializer and any tool written
for LangGraph stores can read it) under a key derived from where it came from. Its
:class:`Provenance` says which thread, which messages, which checkpoint, when the
messages were said, when the note was made and by which summarizer.

Schema 2 adds time and identity: when the fact was said (``observed_at``), when it holds
(``valid_from``, ``valid_to``), what it is a value of (``subject``, ``attribute``), and its
links to the notes it replaced, was replaced by or contradicts. Schema 3 adds what unit of
memory a note is (``unit``: a statement, ``"turn"``, or a whole session, ``"session"``)
and the dates its words name (``dates``: "yesterday" said on 8 May is 7 May). Values
written under an older ``schema_version`` are upgraded when read, one version at a time,
by the migrations registered with :func:`note_migration`.
"""

from __future__ import annotations

import datetime
import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from statekeeper.errors import ConfigurationError, SerializationError

__all__ = [
    "NOTE_KIND",
    "DateSpan",
    "Note",
    "NoteMigration",
    "Provenance",
    "Unit",
    "checked_namespace",
    "normalize_label",
    "note_key",
    "note_migration",
    "notes_namespace",
    "upgrade_note_value",
]

NOTE_KIND = "statekeeper.note"  # the value's "kind": tells notes apart from other items

Unit = Literal["turn", "session"]
"""What a note stands for: one statement of the conversation (``"turn"``), or one session
of it, told in a few words (``"session"``)."""

NoteMigration = Callable[[dict[str, Any]], dict[str, Any]]
"""Upgrades a stored note value of one schema version to the next; returns the new value."""

_MIGRATIONS: dict[int, NoteMigration] = {}


def aware(moment: datetime.datetime) -> datetime.datetime:
    """``moment`` with a timezone: a naive time is taken to be in UTC, as statekeeper
    writes them (naive and aware times cannot be compared)."""
    return moment if moment.utcoffset() is not None else moment.replace(tzinfo=datetime.UTC)


def notes_namespace(thread_id: str) -> tuple[str, ...]:
    """The default namespace of a thread's notes: ``("notes", <thread id>)``, with ``%``,
    ``.`` and NUL percent-encoded (store namespace labels may not contain a period), so
    any two thread ids get two namespaces."""
    if not thread_id:
        raise ConfigurationError("an empty thread id has no notes namespace")
    label = thread_id.replace("%", "%25").replace(".", "%2E").replace("\x00", "%00")
    return ("notes", label)


def checked_namespace(namespace: object) -> tuple[str, ...]:
    """``namespace`` if it is a store namespace (the store's rule: a non-empty tuple of
    non-empty ``str`` labels without ``.`` or NUL), else a one-line ConfigurationError."""
    if not (
        isinstance(namespace, tuple)
        and namespace
        and all(
            isinstance(label, str) and label and "." not in label and "\x00" not in label
            for label in namespace
        )
    ):
        raise ConfigurationError(
            f"invalid notes namespace {namespace!r}: it must be a non-empty tuple of "
            "non-empty str labels without '.' or NUL, such as ('notes', 'ana')"
        )
    return namespace


def normalize_label(text: str) -> str:
    """A subject or attribute as compared: casefolded, inner whitespace collapsed to one
    space, surrounding spaces and punctuation stripped ("  Ana " and "ana" are one)."""
    return re.sub(r"\s+", " ", text.casefold()).strip(" \t.,;:!?\"'")


def _filled_in() -> Any:
    # The default of a field that a validator fills in from the others: typed Any, so a
    # type checker lets the constructor omit it while the field's type stays exact.
    return Field(default=None)


def _said(provenance: Any) -> Any:
    """When a note's messages were said: the last one's time, else the first's, else when
    the note was made. ``provenance`` is a :class:`Provenance` or its JSON."""
    if isinstance(provenance, Mapping):
        times = [provenance.get(name) for name in ("said_to", "said_from", "created_at")]
    else:
        times = [getattr(provenance, name, None) for name in ("said_to", "said_from", "created_at")]
    return next((moment for moment in times if moment is not None), None)


class Provenance(BaseModel):
    """Where a note came from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    thread_id: str
    message_ids: tuple[str, ...]  # the source messages, in conversation order
    checkpoint_id: str | None = None  # the checkpoint whose messages were compressed
    said_from: datetime.datetime | None = None  # when the first source message was said
    said_to: datetime.datetime | None = None  # ... and the last
    created_at: datetime.datetime  # when the note was made
    summarizer: str  # which summarizer made it, with its version: "extractive/4"


class DateSpan(BaseModel):
    """Days a note's words name, resolved against when they were said: ``phrase`` ("last
    Tuesday") names the calendar days ``[start, end)``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    phrase: str
    start: datetime.date
    end: datetime.date

    @model_validator(mode="after")
    def _ordered(self) -> DateSpan:
        if self.end <= self.start:
            raise ValueError("a date span ends after it starts")
        return self


class Note(BaseModel):
    """A memory note: ``text``, its :class:`Provenance`, when it holds and what it is about.

    - ``observed_at``: when the fact was said; by default the provenance's ``said_to``,
      else ``said_from``, else ``created_at``.
    - ``valid_from`` / ``valid_to``: the fact holds from ``valid_from`` (by default
      ``observed_at``) until ``valid_to`` (``None``: still holds). Recall returns a note
      only while it holds, unless asked otherwise.
    - ``subject`` / ``attribute``: the normalised key of the fact ("ana", "home"), both or
      neither; two notes with one key may contradict (see
      :mod:`statekeeper.memory.conflicts`).
    - ``superseded_by`` / ``supersedes``: the key of the note that replaced this one, and
      the keys of the notes this one replaced; ``conflicts_with``: keys of notes this one
      contradicts, both kept.
    - ``unit``: ``"turn"`` (one statement) or ``"session"`` (a session told in a few
      words, with every message of it in its provenance); ``dates``: the days its words
      name (:class:`DateSpan`), which recall's time windows match as well as
      ``observed_at``.

    Times are always timezone-aware (a naive time given is taken to be UTC).
    ``to_value()`` is what is stored; ``from_value()`` reads it back, upgrading values
    written under an older ``schema_version`` and refusing newer ones.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: ClassVar[int] = 3

    text: str = Field(min_length=1)
    provenance: Provenance
    topics: tuple[str, ...] = ()  # words or phrases the summarizer found salient
    observed_at: datetime.datetime = _filled_in()  # by default, from the provenance
    valid_from: datetime.datetime = _filled_in()  # by default, observed_at
    valid_to: datetime.datetime | None = None
    subject: str | None = None
    attribute: str | None = None
    superseded_by: str | None = None
    supersedes: tuple[str, ...] = ()
    conflicts_with: tuple[str, ...] = ()
    unit: Unit = "turn"
    dates: tuple[DateSpan, ...] = ()

    @model_validator(mode="before")
    @classmethod
    def _default_times(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        data = dict(data)
        if data.get("observed_at") is None:
            data["observed_at"] = _said(data.get("provenance"))
        if data.get("valid_from") is None:
            data["valid_from"] = data["observed_at"]
        return data

    @field_validator("observed_at", "valid_from", "valid_to")
    @classmethod
    def _aware(cls, moment: datetime.datetime | None) -> datetime.datetime | None:
        return aware(moment) if moment is not None else None

    @field_validator("subject", "attribute")
    @classmethod
    def _label(cls, label: str | None) -> str | None:
        if label is None:
            return None
        normal = normalize_label(label)
        if not normal:
            raise ValueError("a subject or attribute needs a word")
        return normal

    @model_validator(mode="after")
    def _consistent(self) -> Note:
        if (self.subject is None) != (self.attribute is None):
            raise ValueError("subject and attribute go together: give both or neither")
        if self.valid_to is not None and self.valid_to < self.valid_from:
            raise ValueError("valid_to is before valid_from")
        return self

    @property
    def key(self) -> str:
        """The store key: the same note from the same messages always gets the same key,
        so writing it again after a crash replaces it instead of duplicating it. A session
        note's key is its session's (thread and first message): told again as the session
        goes on, it replaces its earlier telling."""
        if self.unit == "session":
            return note_key(self.provenance.thread_id, self.provenance.message_ids[:1], "\0session")
        return note_key(self.provenance.thread_id, self.provenance.message_ids, self.text)

    @property
    def fact(self) -> tuple[str, str] | None:
        """``(subject, attribute)``, or ``None`` for a note with no key."""
        if self.subject is None or self.attribute is None:
            return None
        return (self.subject, self.attribute)

    def valid_at(self, moment: datetime.datetime) -> bool:
        """Whether the note holds at ``moment``: ``valid_from <= moment < valid_to``."""
        moment = aware(moment)
        return self.valid_from <= moment and (self.valid_to is None or moment < self.valid_to)

    def to_value(self) -> dict[str, Any]:
        """The note as the JSON value to put in a store. ``subject`` and ``attribute`` are
        top-level keys, so a store's ``filter`` finds the notes of one fact."""
        value = self.model_dump(mode="json")
        value["kind"] = NOTE_KIND
        value["schema_version"] = self.schema_version
        return value

    @classmethod
    def from_value(cls, value: Mapping[str, Any]) -> Note:
        """Read a stored value back, upgrading it first if an older statekeeper wrote it
        (the stored value is not changed).

        Raises:
            SerializationError: the value is not a note, was written by a newer
                statekeeper, or does not validate (the message names the field).
        """
        fields = {
            k: v
            for k, v in upgrade_note_value(value).items()
            if k not in ("kind", "schema_version")
        }
        try:
            return cls.model_validate(fields)
        except ValidationError as exc:
            first = exc.errors()[0]
            path = ".".join(str(part) for part in first["loc"]) or "note"
            raise SerializationError(f"invalid note: {path}: {first['msg']}") from exc


def note_key(thread_id: str, message_ids: Sequence[str], text: str) -> str:
    """A stable key for the note ``text`` made from ``message_ids`` of ``thread_id``."""
    digest = hashlib.sha256()
    for part in (thread_id, *message_ids, text):
        digest.update(part.encode("utf-8", "surrogatepass"))
        digest.update(b"\0")
    return digest.hexdigest()[:32]


def note_migration(*, from_version: int) -> Callable[[NoteMigration], NoteMigration]:
    """Register the decorated function as the upgrade of note values from
    ``from_version`` to ``from_version + 1``. It gets a copy of the stored value (with
    ``kind`` and ``schema_version``) and returns the value of the next version.

    Raises:
        ConfigurationError: ``from_version`` is not below :attr:`Note.schema_version`, or
            a migration from it is already registered.
    """
    if not 1 <= from_version < Note.schema_version:
        raise ConfigurationError(
            f"notes are at schema version {Note.schema_version}: a migration starts at "
            f"a version from 1 to {Note.schema_version - 1}, not {from_version}"
        )
    if from_version in _MIGRATIONS:
        raise ConfigurationError(f"a note migration from version {from_version} exists")

    def register(func: NoteMigration) -> NoteMigration:
        _MIGRATIONS[from_version] = func
        return func

    return register


def upgrade_note_value(value: Mapping[str, Any]) -> dict[str, Any]:
    """A stored note value brought up to the current schema version (a new dict; the
    current version's values come back as a copy). Not validated.

    Raises:
        SerializationError: not a note, written by a newer statekeeper, or a migration
            failed.
    """
    if value.get("kind") != NOTE_KIND:
        raise SerializationError(f"not a statekeeper note: kind {value.get('kind')!r}")
    version = value.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise SerializationError(f"invalid note schema version {version!r}")
    if version > Note.schema_version:
        raise SerializationError(
            f"note schema version {version!r} is newer than this statekeeper's "
            f"({Note.schema_version}); upgrade statekeeper to read it"
        )
    current = dict(value)
    for step in range(version, Note.schema_version):
        try:
            current = dict(_MIGRATIONS[step](dict(current)))
        except Exception as exc:  # a damaged old value: unreadable, like any invalid note
            raise SerializationError(
                f"cannot upgrade a note from schema version {step}: {type(exc).__name__}: {exc}"
            ) from exc
        current["schema_version"] = step + 1
    return current


@note_migration(from_version=1)
def _v1_to_v2(value: dict[str, Any]) -> dict[str, Any]:
    # Version 1 had no times of its own, no key and no links. Its notes were said when
    # their last message was, hold from then on, and contradict nothing.
    observed = _said(value["provenance"])
    return {
        **value,
        "observed_at": observed,
        "valid_from": observed,
        "valid_to": None,
        "subject": None,
        "attribute": None,
        "superseded_by": None,
        "supersedes": [],
        "conflicts_with": [],
    }


@note_migration(from_version=2)
def _v2_to_v3(value: dict[str, Any]) -> dict[str, Any]:
    # Version 2 notes were all statements, and kept the dates they named only in their text.
    return {**value, "unit": "turn", "dates": []}
