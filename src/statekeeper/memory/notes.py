"""Memory notes and their provenance: what every part of :mod:`statekeeper.memory` shares.

A note is a short text distilled from conversation messages, stored in a LangGraph
``BaseStore`` as a plain JSON value (so any store, any serializer and any tool written
for LangGraph stores can read it) under a key derived from where it came from. Its
:class:`Provenance` says which thread, which messages, which checkpoint, when the
messages were said, when the note was made and by which summarizer.
"""

from __future__ import annotations

import datetime
import hashlib
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from statekeeper.errors import SerializationError

__all__ = ["NOTE_KIND", "Note", "Provenance", "note_key"]

NOTE_KIND = "statekeeper.note"  # the value's "kind": tells notes apart from other items


class Provenance(BaseModel):
    """Where a note came from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    thread_id: str
    message_ids: tuple[str, ...]  # the source messages, in conversation order
    checkpoint_id: str | None = None  # the checkpoint whose messages were compressed
    said_from: datetime.datetime | None = None  # when the first source message was said
    said_to: datetime.datetime | None = None  # ... and the last
    created_at: datetime.datetime  # when the note was made
    summarizer: str  # which summarizer made it, with its version: "extractive/2"


class Note(BaseModel):
    """A memory note: ``text`` and its :class:`Provenance`.

    ``to_value()`` is what is stored; ``from_value()`` reads it back, upgrading values
    written under an older ``schema_version`` and refusing newer ones.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: ClassVar[int] = 1

    text: str = Field(min_length=1)
    provenance: Provenance
    topics: tuple[str, ...] = ()  # words or phrases the summarizer found salient

    @property
    def key(self) -> str:
        """The store key: the same note from the same messages always gets the same key,
        so writing it again after a crash replaces it instead of duplicating it."""
        return note_key(self.provenance.thread_id, self.provenance.message_ids, self.text)

    def to_value(self) -> dict[str, Any]:
        """The note as the JSON value to put in a store."""
        value = self.model_dump(mode="json")
        value["kind"] = NOTE_KIND
        value["schema_version"] = self.schema_version
        return value

    @classmethod
    def from_value(cls, value: Mapping[str, Any]) -> Note:
        """Read a stored value back.

        Raises:
            SerializationError: the value is not a note, was written by a newer
                statekeeper, or does not validate (the message names the field).
        """
        if value.get("kind") != NOTE_KIND:
            raise SerializationError(f"not a statekeeper note: kind {value.get('kind')!r}")
        version = value.get("schema_version")
        if not isinstance(version, int) or version > cls.schema_version:
            raise SerializationError(
                f"note schema version {version!r} is newer than this statekeeper's "
                f"({cls.schema_version}); upgrade statekeeper to read it"
            )
        fields = {k: v for k, v in value.items() if k not in ("kind", "schema_version")}
        try:
            return cls.model_validate(fields)
        except ValidationError as exc:
            first = exc.errors()[0]
            path = ".".join(str(part) for part in first["loc"])
            raise SerializationError(f"invalid note: {path}: {first['msg']}") from exc


def note_key(thread_id: str, message_ids: Sequence[str], text: str) -> str:
    """A stable key for the note ``text`` made from ``message_ids`` of ``thread_id``."""
    digest = hashlib.sha256()
    for part in (thread_id, *message_ids, text):
        digest.update(part.encode("utf-8", "surrogatepass"))
        digest.update(b"\0")
    return digest.hexdigest()[:32]
