"""``statekeeper ui``: a local web inspector over any storage statekeeper opens.

Threads, a thread's checkpoints as a tree, a checkpoint's state and diff, interrupts,
the graph and the memory store, as server-rendered pages that also answer JSON, behind a
one-time token, a host check and a strict Content-Security-Policy
(:mod:`statekeeper.ui.security`). Read-only unless started with ``--write``.

Needs the extra: ``pip install 'statekeeper[ui]'`` (Starlette, Jinja2, uvicorn); only
this package imports them. See ``docs/ui.md``.

>>> from statekeeper.checkpointers import open_checkpointer
>>> from statekeeper.ui import UIOptions, create_app
>>> saver = open_checkpointer("memory://")
>>> app = create_app(UIOptions(saver=saver, token="secret"))
"""

from __future__ import annotations

from statekeeper.ui.app import UIOptions, create_app
from statekeeper.ui.security import new_token

__all__ = ["UIOptions", "create_app", "new_token"]
