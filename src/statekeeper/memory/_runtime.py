"""The store a memory node works with: its own, else the one its graph was compiled with."""

from __future__ import annotations

from langgraph.config import get_store
from langgraph.store.base import BaseStore

from statekeeper.errors import ConfigurationError

__all__ = ["graph_store"]


def graph_store(store: BaseStore | None, owner: str, purpose: str) -> BaseStore:
    """``store`` when given, else the running graph's store (``compile(store=...)``).

    Raises:
        ConfigurationError: neither exists; the message names ``owner`` and ``purpose``.
    """
    if store is not None:
        return store
    try:
        found = get_store()
    except RuntimeError:  # called outside a graph run
        found = None
    if found is None:
        raise ConfigurationError(
            f"{owner} has no store {purpose}: compile the graph with store=..., or pass "
            "store=... to the node"
        )
    return found
