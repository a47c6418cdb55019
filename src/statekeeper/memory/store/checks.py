"""Every check a memory store makes of what it is given, in one place, so every backend
refuses the same input the same way, with a one-line error, before anything is written.

* Namespaces (:func:`namespace`): a tuple of labels (a list is read as the tuple of its
  items; a string is refused: it is not split into one label per character). Labels follow
  LangGraph's rules (``InvalidNamespaceError``: not a string, empty, with ``.`` or NUL);
  a label that is not valid unicode text (a lone surrogate) raises ``InvalidIdError``, as
  a key does.
* Keys (:func:`key`): strings of valid unicode text, never converted (``None`` is not the
  key ``"None"``).
* Sizes: what every backend can store (the tightest is PostgreSQL's index row, the file
  store's path length): at most :data:`MAX_LABELS` labels, and at most
  :data:`MAX_ID_BYTES` bytes for a key and for a namespace (its labels joined by ``.``),
  counted in UTF-8 with NUL and U+0001 counting two (as PostgreSQL stores them). Beyond
  that: ``InvalidIdError`` naming the limit.
* TTLs (:func:`ttl`): ``None`` or a number of minutes > 0, finite, not a bool, at most
  :data:`MAX_TTL_MINUTES` (``ConfigurationError``).
* Values nest at most :data:`MAX_DEPTH` levels (``SerializationError``, in ``values``);
  filters too (``ConfigurationError``).
* Operations (:func:`check_op`), batches (:func:`check_ops`), pages, ``max_depth``,
  filters, and the store's options (:func:`weight`, :func:`ttl_config`; each option's
  kind, URL text or keyword, is checked by :func:`statekeeper.urls.parse_options`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, cast

from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    SearchOp,
    TTLConfig,
)

from statekeeper.errors import ConfigurationError, InvalidIdError

__all__ = [
    "FILTER_OPERATORS",
    "MAX_DEPTH",
    "MAX_ID_BYTES",
    "MAX_LABELS",
    "MAX_TTL_MINUTES",
    "check_filter",
    "check_op",
    "check_ops",
    "deeper_than",
    "key",
    "max_depth",
    "namespace",
    "page",
    "shown",
    "ttl",
    "ttl_config",
    "weight",
]

MAX_LABELS = 16  # the file store: a folder per label, and paths stay under PATH_MAX
MAX_ID_BYTES = 1024  # PostgreSQL: a (namespace, key) index row holds at most ~2.7 kB
MAX_TTL_MINUTES = 1_000_000_000  # about 1,900 years: Redis PEXPIRE and dates hold it
MAX_DEPTH = 100  # nesting of values and filters: encoded and decoded without recursing deep

FILTER_OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")
_TTL_KEYS = ("default_ttl", "refresh_on_read", "omit_expired", "sweep_interval_minutes")
_OPS = "GetOp, PutOp, SearchOp or ListNamespacesOp"


def shown(value: object, width: int = 60) -> str:
    """``repr(value)``, cut to ``width`` characters: one short line for any input."""
    try:
        text = " ".join(repr(value).split())
    except Exception:  # a hostile __repr__
        text = f"<{type(value).__name__} object>"
    return text if len(text) <= width else text[: width - 3] + "..."


def _stored_size(text: str) -> int:
    # UTF-8, with NUL and U+0001 escaped to two characters (as PostgreSQL stores ids)
    return len(text.encode("utf-8")) + text.count("\x00") + text.count("\x01")


def _unicode(text: str, what: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidIdError(
            f"{what} {shown(text)} is not valid unicode text: {exc.reason}"
        ) from None


def key(value: object) -> str:
    """``value`` if it is a key every backend stores exactly."""
    if not isinstance(value, str):
        raise InvalidIdError(f"a key must be a string, got {type(value).__name__} {shown(value)}")
    _unicode(value, "key")
    if _stored_size(value) > MAX_ID_BYTES:
        raise InvalidIdError(
            f"key {shown(value)} is too long: at most {MAX_ID_BYTES} bytes (UTF-8) on every backend"
        )
    return value


def namespace(value: object, what: str = "namespace") -> tuple[str, ...]:
    """``value`` as a namespace tuple (a list gives the tuple of its labels), refused when
    it is not a sequence of valid labels or is larger than every backend can store. An
    empty namespace passes: whether one is allowed depends on the operation."""
    if not isinstance(value, tuple | list):
        hint = f"; write ({shown(value)},) for one label" if isinstance(value, str) else ""
        raise InvalidNamespaceError(
            f"a {what} must be a tuple of strings, got {type(value).__name__} {shown(value)}" + hint
        )
    labels = tuple(value)
    for label in labels:
        if not isinstance(label, str):
            raise InvalidNamespaceError(
                f"{what} labels must be strings, got {type(label).__name__} {shown(label)} "
                f"in {shown(labels)}"
            )
        if not label or "." in label or "\x00" in label:
            raise InvalidNamespaceError(
                f"invalid {what} label {shown(label)}: a label cannot be empty or contain "
                "'.' or NUL"
            )
        _unicode(label, f"{what} label")
    if len(labels) > MAX_LABELS:
        raise InvalidIdError(
            f"a {what} has at most {MAX_LABELS} labels on every backend, got {len(labels)}"
        )
    size = sum(_stored_size(label) for label in labels) + max(len(labels) - 1, 0)
    if size > MAX_ID_BYTES:
        raise InvalidIdError(
            f"{what} {shown(labels)} is too long: at most {MAX_ID_BYTES} bytes (UTF-8, labels "
            f"joined by '.') on every backend, got {size}"
        )
    return labels


def ttl(value: object, what: str = "ttl") -> float | None:
    """``value`` if it is ``None`` or a TTL every backend stores: minutes > 0, finite, not
    a bool, at most :data:`MAX_TTL_MINUTES`."""
    if value is None:
        return None
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or not (math.isfinite(value) and 0 < value <= MAX_TTL_MINUTES)
    ):
        raise ConfigurationError(
            f"{what} must be a number of minutes > 0 and <= {MAX_TTL_MINUTES:,} (or None), "
            f"got {shown(value)}"
        )
    return value


def ttl_config(config: object) -> TTLConfig | None:
    """``config`` if it is ``None`` or a valid LangGraph ``TTLConfig``."""
    if config is None:
        return None
    if not isinstance(config, Mapping):
        raise ConfigurationError(
            "ttl must be LangGraph's TTLConfig, a mapping such as {'default_ttl': 60}, or "
            f"None, got {shown(config)}"
        )
    unknown = [name for name in config if name not in _TTL_KEYS]
    if unknown:
        raise ConfigurationError(
            f"unknown ttl option(s) {shown(unknown)}; known: {', '.join(_TTL_KEYS)}"
        )
    ttl(config.get("default_ttl"), "default_ttl")
    for flag in ("refresh_on_read", "omit_expired"):
        if not isinstance(config.get(flag, True), bool):
            raise ConfigurationError(f"{flag} must be True or False, got {shown(config[flag])}")
    ttl(config.get("sweep_interval_minutes"), "sweep_interval_minutes")
    return cast(TTLConfig, dict(config))


def weight(value: object) -> float:
    """``value`` if it is a ``semantic_weight``: a number in [0, 1]."""
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or not 0.0 <= value <= 1.0  # NaN fails too
    ):
        raise ConfigurationError(f"semantic_weight must be a number in [0, 1], got {shown(value)}")
    return float(value)


# -- operations -----------------------------------------------------------------------------


def check_ops(ops: object) -> list[Op]:
    """``ops`` as a list, if it is an iterable of store operations."""
    if isinstance(ops, str | bytes | Mapping) or not isinstance(ops, Iterable):
        raise ConfigurationError(
            f"a batch is an iterable of store operations ({_OPS}), got "
            f"{type(ops).__name__} {shown(ops)}"
        )
    return [check_op(op) for op in ops]


def check_op(op: object) -> Op:
    """``op`` with its namespaces as tuples, if every argument it carries is valid."""
    if isinstance(op, PutOp):
        ns = namespace(op.namespace)
        key(op.key)
        if op.value is not None:
            if not ns or ns[0] == "langgraph":
                raise InvalidNamespaceError(
                    f"cannot put into namespace {shown(ns)}: it must have at least one label "
                    "and its first label cannot be 'langgraph'"
                )
            ttl(op.ttl)
            if op.index not in (None, False) and not isinstance(op.index, list | tuple):
                raise ConfigurationError(
                    f"index must be False, None or a list of paths, got {shown(op.index)}"
                )
        return op._replace(namespace=ns)
    if isinstance(op, GetOp):
        ns = namespace(op.namespace)
        key(op.key)
        _flag(op.refresh_ttl, "refresh_ttl")
        return op._replace(namespace=ns)
    if isinstance(op, SearchOp):
        prefix = namespace(op.namespace_prefix, "namespace prefix")
        page(op.limit, op.offset)
        if op.query is not None and not isinstance(op.query, str):
            raise ConfigurationError(f"a search query must be text, got {shown(op.query)}")
        if op.filter is not None:
            check_filter(op.filter)
        _flag(op.refresh_ttl, "refresh_ttl")
        return op._replace(namespace_prefix=prefix)
    if isinstance(op, ListNamespacesOp):
        page(op.limit, op.offset)
        max_depth(op.max_depth)
        return op._replace(match_conditions=_conditions(op.match_conditions))
    raise ConfigurationError(f"unknown store operation: {type(op).__name__} {shown(op)}")


def page(limit: object, offset: object) -> None:
    """Refuse a ``limit`` or ``offset`` that is not an integer >= 0 (a negative one would
    count from the end)."""
    for name, value in (("limit", limit), ("offset", offset)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ConfigurationError(f"{name} must be an integer >= 0, got {shown(value)}")


def max_depth(value: object) -> None:
    """Refuse a ``max_depth`` that is neither ``None`` nor an integer >= 1."""
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        raise ConfigurationError(f"max_depth must be an integer >= 1 or None, got {shown(value)}")


def deeper_than(value: object, limit: int) -> bool:
    """Whether ``value`` nests mappings and lists more than ``limit`` levels deep (walked
    without recursion, so any depth is measured)."""
    todo: list[tuple[object, int]] = [(value, 1)]
    while todo:
        current, depth = todo.pop()
        if isinstance(current, Mapping):
            children: Iterable[object] = current.values()
        elif isinstance(current, list | tuple):
            children = current
        else:
            continue
        if depth > limit:
            return True
        todo.extend((child, depth + 1) for child in children)
    return False


def check_filter(conditions: object) -> None:
    """Refuse a filter that is not a mapping with string keys, nests more than
    :data:`MAX_DEPTH` levels, or uses an operator not in ``FILTER_OPERATORS``."""
    if not isinstance(conditions, Mapping):
        raise ConfigurationError(f"a search filter must be a mapping, got {shown(conditions)}")
    if deeper_than(conditions, MAX_DEPTH):
        raise ConfigurationError(f"a search filter nests at most {MAX_DEPTH} levels")
    todo: list[Mapping[Any, Any]] = [conditions]
    while todo:
        current = todo.pop()
        for name, expected in current.items():
            if not isinstance(name, str):
                raise ConfigurationError(
                    f"search filter keys must be strings, got {type(name).__name__} {shown(name)}"
                )
            if not isinstance(expected, Mapping):
                continue
            is_operators = any(isinstance(k, str) and k.startswith("$") for k in expected)
            if is_operators and any(k not in FILTER_OPERATORS for k in expected):
                raise ConfigurationError(
                    f"unknown filter operator in {shown(dict(expected))}; "
                    f"supported: {', '.join(FILTER_OPERATORS)}"
                )
            if not is_operators:
                todo.append(expected)


def _flag(value: object, name: str) -> None:
    if not isinstance(value, bool):
        raise ConfigurationError(f"{name} must be True or False, got {shown(value)}")


def _conditions(conditions: object) -> tuple[MatchCondition, ...]:
    if conditions is None:
        return ()
    if not isinstance(conditions, tuple | list):
        raise ConfigurationError(
            f"match_conditions must be a tuple of MatchCondition, got {shown(conditions)}"
        )
    checked = []
    for condition in conditions:
        if not isinstance(condition, MatchCondition):
            raise ConfigurationError(f"not a MatchCondition: {shown(condition)}")
        if condition.match_type not in ("prefix", "suffix"):
            raise ConfigurationError(
                f"unknown namespace match type {shown(condition.match_type)}; use 'prefix' "
                "or 'suffix'"
            )
        path = namespace(condition.path, f"namespace {condition.match_type}")
        checked.append(condition._replace(path=path))
    return tuple(checked)
