"""Memory: compress old conversation history into notes with provenance, and recall them.

* :class:`SummarizationNode` keeps a thread's messages within a token budget: it moves the
  oldest into a running summary and into notes in a LangGraph store, each note saying
  which thread, messages and checkpoint it came from.
* :func:`open_store` opens a LangGraph ``BaseStore`` by URL (``sqlite:///``, ``file://``,
  ``redis://``, ``memory://``) whose search needs no embedding model and scores relevance
  in [0, 1], the same on every backend.
* :func:`recall` returns at most ``k`` notes above a relevance floor — possibly none —
  that hold at the time asked about, and :class:`RetrievalNode` puts them into the state
  for the next model call.
* A note that states a new value of a fact already noted supersedes it, or is flagged as
  conflicting with it (:func:`write_notes` and its :class:`ConflictPolicy`); nothing is
  deleted, and :func:`supersede_chain` follows the links.

See ``docs/memory.md``.
"""

from __future__ import annotations

from statekeeper.errors import SummarizerOutputError
from statekeeper.memory.conflicts import (
    ConflictPolicy,
    KeepBothFlagged,
    LatestWins,
    ModelJudgedPolicy,
    Verdict,
    supersede_chain,
    write_note,
    write_notes,
)
from statekeeper.memory.metrics import MemoryStats, memory_stats
from statekeeper.memory.node import (
    RunningSummary,
    SummarizationNode,
    SummaryState,
    checkpoint_id_of,
    notes_namespace,
    with_summary,
)
from statekeeper.memory.notes import (
    NOTE_KIND,
    Note,
    Provenance,
    note_key,
    note_migration,
    upgrade_note_value,
)
from statekeeper.memory.recall import DEFAULT_MIN_SCORE, Hit, recall
from statekeeper.memory.retrieval import RetrievalNode, format_memories
from statekeeper.memory.store import MemoryStore, SqliteStore, known_store_schemes, open_store
from statekeeper.memory.summarize import (
    ChatModelSummarizer,
    ExtractiveSummarizer,
    NoteDraft,
    Summarizer,
    Summary,
)

__all__ = [
    "DEFAULT_MIN_SCORE",
    "NOTE_KIND",
    "ChatModelSummarizer",
    "ConflictPolicy",
    "ExtractiveSummarizer",
    "Hit",
    "KeepBothFlagged",
    "LatestWins",
    "MemoryStats",
    "MemoryStore",
    "ModelJudgedPolicy",
    "Note",
    "NoteDraft",
    "Provenance",
    "RetrievalNode",
    "RunningSummary",
    "SqliteStore",
    "SummarizationNode",
    "Summarizer",
    "SummarizerOutputError",
    "Summary",
    "SummaryState",
    "Verdict",
    "checkpoint_id_of",
    "format_memories",
    "known_store_schemes",
    "memory_stats",
    "note_key",
    "note_migration",
    "notes_namespace",
    "open_store",
    "recall",
    "supersede_chain",
    "upgrade_note_value",
    "with_summary",
    "write_note",
    "write_notes",
]
