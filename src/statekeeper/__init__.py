"""statekeeper: durable state for LangGraph agent workflows.

Checkpointers chosen by URL (:func:`open_checkpointer`), resumable by thread id, with one
exception tree rooted at :class:`StatekeeperError` (every error type is listed once, in
:mod:`statekeeper.errors`, and exported here). Importing this package imports no
optional dependency, and not LangGraph either: :func:`open_checkpointer` loads it on
first use, so ``statekeeper --help`` starts at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from statekeeper import errors
from statekeeper.errors import *

if TYPE_CHECKING:
    from statekeeper.checkpointers import open_checkpointer as open_checkpointer

__all__ = [*errors.__all__, "open_checkpointer"]

__version__ = "0.1.0.dev0"


def __getattr__(name: str) -> Any:
    # `statekeeper.open_checkpointer` imports the checkpointers (and LangGraph's checkpoint
    # API) when it is first asked for, not when the package is imported
    if name == "open_checkpointer":
        from statekeeper.checkpointers import open_checkpointer

        return open_checkpointer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
