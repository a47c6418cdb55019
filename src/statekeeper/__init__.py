"""statekeeper: durable state for LangGraph agent workflows.

Checkpointers chosen by URL (:func:`open_checkpointer`), resumable by thread id, with one
exception tree rooted at :class:`StatekeeperError` (every error type is listed once, in
:mod:`statekeeper.errors`, and exported here). Importing this package imports no
optional dependency.
"""

from __future__ import annotations

from statekeeper import errors
from statekeeper.checkpointers import open_checkpointer as open_checkpointer
from statekeeper.errors import *

__all__ = [*errors.__all__, "open_checkpointer"]

__version__ = "0.1.0.dev0"
