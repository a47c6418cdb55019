"""One run per thread, when asked: :func:`run_exclusive` and :func:`arun_exclusive`.

LangGraph lets any number of ``invoke`` calls run on one thread at once; each starts from
the checkpoint it read, so concurrent runs branch and all but one lose their updates
(they stay in the history, not in the newest state). A service that must not lose them
runs each call through :func:`run_exclusive`, which holds the thread's claim
(:meth:`Checkpointer.claim_thread`) around ``graph.invoke``. What a call does when another
run holds the thread is its ``multitask`` strategy, named as in LangGraph Platform:

``"reject"``
    refuse at once with :class:`~statekeeper.errors.ThreadBusyError` naming the holder;
    nothing is written for the refused call.
``"enqueue"``
    wait until the thread is free (at most ``timeout`` seconds), then run from the newest
    state: each run sees every earlier run's updates.

Claims hold across every process (and, on Redis, every host) using the same storage, and
a holder that dies frees its threads: flock claims at once (the kernel releases them),
Redis claims when their TTL (``claim_ttl``) runs out. Waiters are not served in arrival
order: whichever tries first after a release gets the thread.

LangGraph Platform's ``"interrupt"`` and ``"rollback"`` are not offered (docs/graphs.md
says why).
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from langchain_core.runnables import RunnableConfig
from langgraph.pregel import Pregel

from statekeeper.checkpointers.base import Checkpointer
from statekeeper.errors import ConfigurationError

__all__ = ["MULTITASK", "Multitask", "arun_exclusive", "run_exclusive"]

Multitask = Literal["reject", "enqueue"]
MULTITASK: tuple[Multitask, ...] = get_args(Multitask)


def run_exclusive(
    graph: Pregel[Any],
    input: Any,
    config: RunnableConfig,
    *,
    multitask: Multitask = "reject",
    timeout: float | None = None,
    **invoke_options: Any,
) -> Any:
    """``graph.invoke(input, config, **invoke_options)`` while holding the claim on the
    config's thread, so no other exclusive run (nor a ``Runner``) advances the thread at
    the same time; returns what ``invoke`` returns. The claim is released when ``invoke``
    returns or raises, after every checkpoint of the run is stored.

    Raises:
        ThreadBusyError: another run holds the thread (``"reject"``), or still holds it
            after ``timeout`` seconds (``"enqueue"``); the graph did not run and nothing
            was written.
        ConfigurationError: the graph's checkpointer is not a statekeeper checkpointer,
            the config names no thread, or ``multitask``/``timeout`` is not valid.
        ReadOnlyError: the storage is read-only.
    """
    saver, thread_id, wait = _claim_args(graph, config, multitask, timeout)
    with saver.claim_thread(thread_id, wait=wait):
        return graph.invoke(input, config, **invoke_options)


async def arun_exclusive(
    graph: Pregel[Any],
    input: Any,
    config: RunnableConfig,
    *,
    multitask: Multitask = "reject",
    timeout: float | None = None,
    **invoke_options: Any,
) -> Any:
    """:func:`run_exclusive` with ``await graph.ainvoke(...)``: waiting for the thread
    and taking its claim never block the event loop."""
    saver, thread_id, wait = _claim_args(graph, config, multitask, timeout)
    async with saver.aclaim_thread(thread_id, wait=wait):
        return await graph.ainvoke(input, config, **invoke_options)


def _claim_args(
    graph: Pregel[Any], config: RunnableConfig, multitask: str, timeout: float | None
) -> tuple[Checkpointer, str, float | None]:
    """The checkpointer, the thread and how long to wait for it (``claim_thread``'s
    ``wait``), all checked before anything runs."""
    saver = graph.checkpointer
    if not isinstance(saver, Checkpointer):
        raise ConfigurationError(
            "run_exclusive needs a graph compiled with a statekeeper checkpointer "
            f"(open_checkpointer(url)); this one has {type(saver).__name__}"
        )
    thread_id = (config.get("configurable") or {}).get("thread_id")
    if thread_id is None:
        raise ConfigurationError(
            'run_exclusive needs the thread in config["configurable"]["thread_id"]'
        )
    if multitask not in MULTITASK:
        raise ConfigurationError(
            f"multitask must be one of {', '.join(map(repr, MULTITASK))}, got {multitask!r}"
        )
    if multitask == "reject":
        if timeout is not None:
            raise ConfigurationError("timeout applies to multitask='enqueue' only")
        return saver, thread_id, None
    return saver, thread_id, float("inf") if timeout is None else timeout
