"""Small pieces of checkpointer semantics shared by every backend.

Keeping them here is what makes the backends agree on the details LangGraph's
conformance suite does not pin down: metadata merging, filter equality, version numbers.
"""

from __future__ import annotations

import json
import random
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import EXCLUDED_METADATA_KEYS, CheckpointMetadata

from statekeeper.checkpointers._payload import check_id
from statekeeper.errors import ConfigurationError, SerializationError

__all__ = [
    "PRUNE_STRATEGIES",
    "dump_metadata",
    "location",
    "matches",
    "merged_metadata",
    "next_version",
]

PRUNE_STRATEGIES = ("keep_latest", "delete")


def location(config: RunnableConfig) -> tuple[str, str, str | None]:
    """Return ``(thread_id, checkpoint_ns, checkpoint_id or None)`` from a config, validated."""
    configurable = config.get("configurable") or {}
    if "thread_id" not in configurable:
        raise ConfigurationError(
            'the config has no thread_id; pass {"configurable": {"thread_id": "..."}}'
        )
    thread_id = check_id(configurable["thread_id"], "thread_id")
    checkpoint_ns = check_id(
        configurable.get("checkpoint_ns") or "", "checkpoint_ns", allow_empty=True
    )
    checkpoint_id = configurable.get("checkpoint_id")
    if checkpoint_id is not None:
        checkpoint_id = check_id(checkpoint_id, "checkpoint_id")
    return thread_id, checkpoint_ns, checkpoint_id


def merged_metadata(config: RunnableConfig, metadata: CheckpointMetadata) -> dict[str, Any]:
    """The metadata to store: ``metadata`` plus scalar entries of the config's
    ``metadata``/``configurable`` (as LangGraph's savers do), without the transient
    ``writes`` key. Unlike LangGraph's helper, string values are kept exactly (NUL too)."""
    merged: dict[str, Any] = dict(metadata)
    merged.pop("writes", None)
    for source in (config.get("metadata"), config.get("configurable")):
        for key, value in (source or {}).items():
            if key in merged or key in EXCLUDED_METADATA_KEYS or key.startswith("__"):
                continue
            if isinstance(value, str | int | float | bool):
                merged[key] = value
    return merged


def dump_metadata(metadata: dict[str, Any]) -> str:
    """Metadata as canonical JSON text (sorted keys, ASCII, so any string survives).

    Raises:
        SerializationError: a value is not JSON (NaN, a datetime, an object...).
    """
    try:
        return json.dumps(metadata, sort_keys=True, ensure_ascii=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise SerializationError(
            f"checkpoint metadata must be JSON (str, int, float, bool, None, lists and "
            f"dicts of them): {exc}"
        ) from exc


def matches(metadata: dict[str, Any], filter: dict[str, Any]) -> bool:
    """Filter equality: every key's value equals the query value as JSON values do.

    Unlike Python's ``==``, ``True`` does not equal ``1`` and ``0`` does not equal ``False``;
    a missing key behaves as ``None`` (as in LangGraph's ``InMemorySaver``).
    """
    return all(_json_equal(metadata.get(key), value) for key, value in filter.items())


def _json_equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a is b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict | list | tuple) or isinstance(b, dict | list | tuple):
        return False
    return bool(a == b)


def next_version(current: str | int | float | None) -> str:
    """The version after ``current``: ``"<32-digit counter>.<16-digit random>"``.

    The counter makes versions strictly increasing; the random part keeps two forks of
    one checkpoint from producing the same version for different values (values are
    stored once per version). Accepts ints and floats from other savers.
    """
    if current is None:
        counter = 0
    elif isinstance(current, int | float):
        counter = int(current)
    else:
        counter = int(current.split(".", 1)[0])
    return f"{counter + 1:032}.{random.random():016}"  # noqa: S311 - not a secret
