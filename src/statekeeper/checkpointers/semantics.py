"""Small pieces of checkpointer semantics shared by every backend.

Keeping them here is what makes the backends agree on the details LangGraph's
conformance suite does not pin down: metadata merging, filter equality, version numbers.
"""

from __future__ import annotations

import json
import operator
import random
import re
from collections.abc import Iterable, Sequence
from json.encoder import encode_basestring_ascii as _json_text
from typing import Any, SupportsIndex

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import EXCLUDED_METADATA_KEYS, CheckpointMetadata

from statekeeper._storage.json import json_equal
from statekeeper._storage.payload import check_id
from statekeeper.errors import ConfigurationError, InvalidIdError, SerializationError

__all__ = [
    "MODES",
    "ON_CORRUPT",
    "PRUNE_STRATEGIES",
    "before_id",
    "check_choice",
    "check_copy_ids",
    "check_prune_ids",
    "check_prune_strategy",
    "check_run_ids",
    "checkpoint_config",
    "dump_metadata",
    "list_scope",
    "location",
    "matches",
    "merged_metadata",
    "metadata_index_keys",
    "next_version",
    "stored_version",
    "version_key",
]

PRUNE_STRATEGIES = ("keep_latest", "delete")
# The option every backend takes for how it opens its storage (?mode=ro in a URL): "rw"
# reads and writes (creating the storage if missing); "ro" never writes or creates
# anything, and a backend also opens read-only storage it finds not writable.
MODES = ("rw", "ro")
# What a read does with a damaged checkpoint: raise CorruptCheckpointError, or serve the
# newest intact one and log a warning naming what was skipped.
ON_CORRUPT = ("raise", "fallback")


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


def list_scope(config: RunnableConfig | None) -> tuple[str | None, str | None, str | None]:
    """What ``list(config)`` is narrowed to: ``(thread_id, checkpoint_ns, checkpoint_id)``,
    each ``None`` when not given (no config: every thread; no ``checkpoint_ns`` key: every
    namespace of the thread; ``""`` is the root namespace only)."""
    if config is None:
        return None, None, None
    thread_id, _, checkpoint_id = location(config)
    ns = config["configurable"].get("checkpoint_ns")
    if ns is not None:
        ns = check_id(ns, "checkpoint_ns", allow_empty=True)
    return thread_id, ns, checkpoint_id


def before_id(before: RunnableConfig | None) -> str | None:
    """The checkpoint id ``list(before=...)`` lists strictly below, if any (any thread)."""
    if before is None:
        return None
    return location({"configurable": {"thread_id": "-", **before["configurable"]}})[2]


def checkpoint_config(thread_id: str, ns: str, checkpoint_id: str) -> RunnableConfig:
    """The config that names one stored checkpoint, as ``put`` returns it."""
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id,
        }
    }


def check_choice(option: str, value: object, choices: tuple[str, ...]) -> str:
    """``value`` when it is one of ``choices``.

    Raises:
        ConfigurationError: it is not; the message lists the choices.
    """
    if not isinstance(value, str) or value not in choices:
        raise ConfigurationError(f"{option} must be one of {', '.join(choices)}, got {value!r}")
    return value


def check_prune_strategy(strategy: str) -> None:
    """Raise :class:`ConfigurationError` unless ``strategy`` is one of PRUNE_STRATEGIES."""
    if strategy not in PRUNE_STRATEGIES:
        raise ConfigurationError(
            f"unknown prune strategy {strategy!r}; use one of {', '.join(PRUNE_STRATEGIES)}"
        )


def merged_metadata(config: RunnableConfig, metadata: CheckpointMetadata) -> dict[str, Any]:
    """The metadata to store: ``metadata`` plus scalar entries of the config's
    ``metadata``/``configurable`` (as LangGraph's savers do), without the transient
    ``writes`` key. Unlike LangGraph's helper, string values are kept exactly (NUL too)."""
    merged: dict[str, Any] = dict(metadata)
    merged.pop("writes", None)
    for source in (config.get("metadata"), config.get("configurable")):
        if not source:
            continue
        for key, value in source.items():
            if key in merged or key in EXCLUDED_METADATA_KEYS or key.startswith("__"):
                continue
            if isinstance(value, _SCALARS):
                merged[key] = value
    return merged


_SCALARS = (str, int, float, bool)
# What json.dumps(sort_keys=True, ensure_ascii=True, allow_nan=False) builds per call;
# encode() keeps no state between calls, so one encoder serves every thread.
_METADATA_JSON = json.JSONEncoder(sort_keys=True, ensure_ascii=True, allow_nan=False)


def dump_metadata(metadata: dict[str, Any]) -> str:
    """Metadata as canonical JSON text (sorted keys, ASCII, so any string survives).

    Raises:
        SerializationError: a value is not JSON (NaN, a datetime, an object...), or is
            nested too deeply to encode.
    """
    try:
        return _METADATA_JSON.encode(metadata)
    except (TypeError, ValueError, RecursionError) as exc:
        raise SerializationError(
            f"checkpoint metadata must be JSON (str, int, float, bool, None, lists and "
            f"dicts of them): {exc}"
        ) from exc


def matches(metadata: dict[str, Any], filter: dict[str, Any]) -> bool:
    """Filter equality: every key's value equals the query value as JSON values do.

    Unlike Python's ``==``, ``True`` does not equal ``1`` and ``0`` does not equal ``False``;
    a missing key behaves as ``None`` (as in LangGraph's ``InMemorySaver``).
    """
    return all(json_equal(metadata.get(key), value) for key, value in filter.items())


_INDEX_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


def metadata_index_keys(keys: str | Iterable[str]) -> tuple[str, ...]:
    """The metadata keys of a checkpointer's ``index_metadata`` option, checked: a
    comma-separated text (as a URL's query gives it) or a sequence of names, each a
    letter or ``_`` followed by up to 63 letters, digits or ``_`` (so a key can name a
    database index and a JSON path as it is). Duplicates are dropped, order kept.

    Raises:
        ConfigurationError: a key is not such a name.
    """
    if isinstance(keys, str):
        names: list[Any] = keys.split(",") if keys.strip() else []
    else:
        names = list(keys)
    checked: dict[str, None] = {}
    for name in names:
        name = name.strip() if isinstance(name, str) else name
        if not isinstance(name, str) or not _INDEX_KEY.fullmatch(name):
            raise ConfigurationError(
                "index_metadata takes metadata keys made of letters, digits and _ (not "
                f"starting with a digit, at most 64 characters), got {name!r}"
            )
        checked[name] = None
    return tuple(checked)


def version_key(version: Any) -> str:
    """A version as stored text: JSON keeps ``1``, ``1.0`` and ``"1"`` apart, so versions
    of any type map to distinct keys. Equal to ``json.dumps(version)``, in a third of its
    time for the usual versions (text and ints): this runs for every channel of every
    ``put``."""
    if type(version) is str:
        return _json_text(version)  # what json.dumps runs for a str
    if type(version) is int:
        return str(version)
    return json.dumps(version)


def stored_version(version: Any) -> str:
    """:func:`version_key` of a version about to be stored, checked: what every backend
    can store and read back as it was given.

    Raises:
        SerializationError: the version is not JSON (an object, NaN, an infinity...).
    """
    if type(version) is str or type(version) is int:
        return version_key(version)
    try:
        return json.dumps(version, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise SerializationError(
            f"channel versions must be strings or numbers (JSON), got {version!r}: {exc}"
        ) from None


def next_version(current: str | int | float | None) -> str:
    """The version after ``current``: ``"<32-digit counter>.<10 random base-36 digits>"``.

    The counter makes versions strictly increasing, in LangGraph's own format (its savers
    read the counter before the dot, zero-padded so that text order is number order; a
    thread moved to one of them goes on from ours). The random part keeps two forks of
    one checkpoint from producing the same version for different values (values are
    stored once per version): 36**10, about 2**51.7 choices, as many as the random float
    LangGraph's savers write there, in 10 characters instead of 18 — a version is part of
    the key of every stored value. Accepts ints, floats and the versions of other savers
    (and of earlier statekeeper releases).
    """
    if current is None:
        counter = 0
    elif isinstance(current, int | float):
        counter = int(current)
    else:
        counter = int(current.split(".", 1)[0])
    return f"{counter + 1:032}.{_random_part()}"


_BASE36 = "0123456789abcdefghijklmnopqrstuvwxyz"


def _random_part() -> str:
    """10 random base-36 digits (``random`` reseeds in a forked child)."""
    return "".join(random.choices(_BASE36, k=10))  # noqa: S311 - not a secret


def check_limit(limit: object) -> int | None:
    """``list``'s ``limit``: ``None`` (no limit) or a whole number (0 or less: nothing),
    as LangGraph's savers read it; a float, a bool or text is refused before any query
    (a float made one backend page forever).

    Raises:
        ConfigurationError: anything else.
    """
    if limit is None:
        return None
    if not isinstance(limit, bool) and isinstance(limit, SupportsIndex):
        return operator.index(limit)  # an int, or another library's (numpy's)
    raise ConfigurationError(
        f"limit must be a whole number or None, got {type(limit).__name__} {limit!r}"
    )


def check_run_ids(run_ids: Sequence[str]) -> tuple[str, ...]:
    """``delete_for_runs``'s ids, checked (all of them, before anything is deleted) and
    without repeats."""
    return tuple(dict.fromkeys(check_id(run_id, "run_id") for run_id in _many(run_ids, "run")))


def _many(ids: object, what: str) -> list[object]:
    """``ids`` as a list, if it is an iterable of ids; one string is refused, since
    iterating it would take each character for an id (``prune("ab")`` deleting threads
    "a" and "b")."""
    if isinstance(ids, str | bytes):
        raise InvalidIdError(
            f"pass a list of {what} ids, not one string: [{ids!r}] for the {what} {ids!r}"
        )
    if not isinstance(ids, Iterable):
        raise InvalidIdError(f"pass a list of {what} ids, got {type(ids).__name__}")
    return list(ids)


def check_copy_ids(source_thread_id: str, target_thread_id: str) -> tuple[str, str]:
    return check_id(source_thread_id, "source thread_id"), check_id(
        target_thread_id, "target thread_id"
    )


def check_prune_ids(thread_ids: Sequence[str], strategy: str) -> tuple[bool, tuple[str, ...]]:
    """``prune``'s arguments checked: (whether to delete, the thread ids)."""
    check_prune_strategy(strategy)
    ids = tuple(
        dict.fromkeys(check_id(thread_id, "thread_id") for thread_id in _many(thread_ids, "thread"))
    )
    return strategy == "delete", ids
