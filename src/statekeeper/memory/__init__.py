"""Memory: compress old conversation history into notes with provenance, and recall them.

See ``docs/memory.md``.
"""

from __future__ import annotations

from statekeeper.memory.notes import NOTE_KIND, Note, Provenance, note_key

__all__ = ["NOTE_KIND", "Note", "Provenance", "note_key"]
