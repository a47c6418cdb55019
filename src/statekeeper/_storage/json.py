"""JSON value equality, shared by metadata filters (checkpointers) and store filters (memory)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["json_equal"]


def json_equal(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` are equal as JSON values. Python's ``==`` says ``True == 1``
    and ``(1,) != [1]``; JSON says the opposite of both."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a is b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, Mapping | list | tuple) or isinstance(b, Mapping | list | tuple):
        return False
    return bool(a == b)
