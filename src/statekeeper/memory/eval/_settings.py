"""What an evaluation runs: the pipeline's settings, shared by the retrieval and the answer
evaluations."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from statekeeper.memory.recall import Limits
from statekeeper.memory.summarize import Summarizer

__all__ = ["DEFAULT_BUDGET_TOKENS", "EvalSettings"]

DEFAULT_BUDGET_TOKENS = 1024
_LIMITS = Limits(k=10)  # the evaluation's default: ten results per question, recall's floor


@dataclass(frozen=True)
class EvalSettings:
    """What :func:`evaluate` runs: the :class:`SummarizationNode`'s ``budget_tokens``,
    ``keep_tokens`` and ``summarizer`` (``None``: its defaults), the :class:`Limits` of
    :func:`recall` (``k`` bounds the baseline's results too), and the store the notes go
    to (``store_url``). ``windows`` and ``facts`` are :class:`Freshness`'s for every
    recall (a question naming a time window ranks the notes said in it first; one asking
    for a fact of a person ranks the notes keyed by it first); questions are asked as of
    the end of their conversation. The report's ``settings`` record them."""

    budget_tokens: int = DEFAULT_BUDGET_TOKENS
    keep_tokens: int | None = None
    summarizer: Summarizer | None = None
    limits: Limits = _LIMITS
    store_url: str = "memory://"
    windows: bool = True
    facts: bool = True

    def node_options(self) -> dict[str, Any]:
        """The :class:`SummarizationNode`'s keywords these settings give."""
        options: dict[str, Any] = {"budget_tokens": self.budget_tokens}
        if self.keep_tokens is not None:
            options["keep_tokens"] = self.keep_tokens
        if self.summarizer is not None:
            options["summarizer"] = self.summarizer
        return options

    def to_json(self) -> dict[str, Any]:
        """The settings as the report records them: plain JSON, ``filter`` only if set."""
        settings: dict[str, Any] = {
            "budget_tokens": self.budget_tokens,
            "keep_tokens": self.keep_tokens,
            "k": self.limits.k,
            "min_score": self.limits.min_score,
            "store_url": self.store_url,
            "summarizer": self.summarizer.name if self.summarizer is not None else None,
            "windows": self.windows,
            "facts": self.facts,
        }
        if self.limits.hops is not None:
            settings["hops"] = dataclasses.asdict(self.limits.hops)
        if self.limits.filter is not None:
            settings["filter"] = dict(self.limits.filter)
        return settings
