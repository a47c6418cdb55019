"""Memory: compress old conversation history into notes with provenance, and recall them.

* :class:`SummarizationNode` keeps a thread's messages within a token budget: it moves the
  oldest into a running summary (:class:`SummaryState`, :func:`with_summary`) and into
  notes (:class:`Note`) in a LangGraph store, each note saying which thread, messages and
  checkpoint it came from; :class:`NoteOptions` says where and how notes are written.
* :func:`open_store` opens a LangGraph ``BaseStore`` by URL (``sqlite:///``, ``file://``,
  ``redis://``, ``memory://``) whose search needs no embedding model and scores relevance
  in [0, 1], the same on every backend.
* :func:`recall` returns the notes relevant to a query as :class:`Hit`\\ s — within its
  :class:`Limits`, possibly none — that hold at the time its :class:`Freshness` asks
  about, and :class:`RetrievalNode` puts them into the state for the next model call
  (:func:`format_memories` for the prompt).
* :func:`memory_stats` aggregates what recalls returned and what compaction saved.

This is the everyday surface. Everything else is imported from its module: note schema
and migrations from ``statekeeper.memory.notes``; conflict policies, ``write_notes`` and
``supersede_chain`` from ``.conflicts``; summarizer protocol and drafts from
``.summarize``; ``RunningSummary``, ``StateOptions`` and ``notes_namespace`` from
``.node``; ``RecallLog`` and ``DEFAULT_MIN_SCORE`` from ``.recall``; store classes from
``.store``; events from ``.metrics``; the benchmark harness from ``.eval``.

See ``docs/memory.md``.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

from statekeeper.memory.metrics import memory_stats
from statekeeper.memory.node import NoteOptions, SummarizationNode, SummaryState, with_summary
from statekeeper.memory.notes import Note
from statekeeper.memory.recall import Freshness, Hit, Hops, Limits, recall
from statekeeper.memory.retrieval import RetrievalNode, format_memories
from statekeeper.memory.store import open_store
from statekeeper.memory.summarize import ChatModelSummarizer, ExtractiveSummarizer

__all__ = [
    "ChatModelSummarizer",
    "ExtractiveSummarizer",
    "Freshness",
    "Hit",
    "Hops",
    "Limits",
    "Note",
    "NoteOptions",
    "RetrievalNode",
    "SummarizationNode",
    "SummaryState",
    "format_memories",
    "memory_stats",
    "open_store",
    "recall",
    "with_summary",
]

#: Names this package exported before its surface was curated, and the module that holds
#: each now. They still resolve here, with a DeprecationWarning, for one release.
_MOVED = {
    **dict.fromkeys(
        ["ConflictPolicy", "KeepBothFlagged", "LatestWins", "ModelJudgedPolicy", "Verdict"],
        "statekeeper.memory.conflicts",
    ),
    **dict.fromkeys(
        ["supersede_chain", "write_note", "write_notes"], "statekeeper.memory.conflicts"
    ),
    "MemoryStats": "statekeeper.memory.metrics",
    **dict.fromkeys(
        ["RunningSummary", "checkpoint_id_of", "notes_namespace"], "statekeeper.memory.node"
    ),
    **dict.fromkeys(
        ["NOTE_KIND", "Provenance", "note_key", "note_migration", "upgrade_note_value"],
        "statekeeper.memory.notes",
    ),
    "DEFAULT_MIN_SCORE": "statekeeper.memory.recall",
    **dict.fromkeys(
        ["MemoryStore", "SqliteStore", "known_store_schemes"], "statekeeper.memory.store"
    ),
    **dict.fromkeys(["NoteDraft", "Summarizer", "Summary"], "statekeeper.memory.summarize"),
    "SummarizerOutputError": "statekeeper.errors",
}


def __getattr__(name: str) -> Any:
    # PEP 562: only names missing from the module get here, so the curated ones cost nothing
    module = _MOVED.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"statekeeper.memory.{name} is deprecated and will be removed: import it from {module}",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(importlib.import_module(module), name)
