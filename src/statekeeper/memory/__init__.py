"""Memory: compress old conversation history into notes with provenance, and recall them.

* :class:`SummarizationNode` keeps a thread's messages within a token budget: it moves the
  oldest into a running summary and into notes in a LangGraph store, each note saying
  which thread, messages and checkpoint it came from.
* :func:`open_store` opens a LangGraph ``BaseStore`` by URL (``sqlite:///``, ``memory://``)
  whose search needs no embedding model and scores relevance in [0, 1].
* :func:`recall` returns at most ``k`` notes above a relevance floor — possibly none — and
  :class:`RetrievalNode` puts them into the state for the next model call.

See ``docs/memory.md``.
"""

from __future__ import annotations

from statekeeper.errors import SummarizerOutputError
from statekeeper.memory.node import (
    RunningSummary,
    SummarizationNode,
    SummaryState,
    checkpoint_id_of,
    notes_namespace,
    with_summary,
)
from statekeeper.memory.notes import NOTE_KIND, Note, Provenance, note_key
from statekeeper.memory.recall import DEFAULT_MIN_SCORE, Hit, recall
from statekeeper.memory.retrieval import RetrievalNode, format_memories
from statekeeper.memory.store import SqliteStore, known_store_schemes, open_store
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
    "ExtractiveSummarizer",
    "Hit",
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
    "checkpoint_id_of",
    "format_memories",
    "known_store_schemes",
    "note_key",
    "notes_namespace",
    "open_store",
    "recall",
    "with_summary",
]
