"""Load a graph named ``"package.module:attr"``, the way the runner and the CLI do."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import StateGraph
from langgraph.pregel import Pregel

from statekeeper.errors import GraphLoadError
from statekeeper.graphs.state import one_line, raised

__all__ = ["load_graph", "state_saver", "state_schema"]

_SHOWN = 60  # widest non-text reference repeated in a message


def load_graph(ref: str, checkpointer: BaseCheckpointSaver[Any] | None = None) -> Pregel[Any]:
    """Import ``ref`` (``"package.module:attr"``, where ``attr`` may be a dotted path)
    with the current directory on the import path, and return it as a compiled graph
    using ``checkpointer``: a ``StateGraph`` builder is compiled with it; a compiled
    graph is copied with its checkpointer replaced (the module's object is unchanged).

    Raises:
        GraphLoadError: the reference is not text or is malformed, the module or
            attribute does not exist, importing or compiling raised (kept as
            ``__cause__``), or the attribute is not a graph. ``reason`` says which; the
            message is one line.
    """
    module_name, attr_path = _split(ref)
    module = _import(ref, module_name)
    target: Any = module
    for depth, name in enumerate(attr_path):
        if not hasattr(target, name):
            owner = ".".join([module_name, *attr_path[:depth]])
            candidates = _graph_names(module) if depth == 0 else []
            hint = f"; graphs it defines: {', '.join(candidates)}" if candidates else ""
            raise GraphLoadError(
                f"cannot load graph {ref!r}: {owner!r} has no attribute {name!r}{hint}",
                ref=ref,
                reason="attribute",
            )
        target = getattr(target, name)
    if isinstance(target, StateGraph):
        try:
            return target.compile(checkpointer=checkpointer)
        except Exception as exc:
            raise GraphLoadError(
                f"cannot load graph {ref!r}: compiling it raised {one_line(raised(exc))}",
                ref=ref,
                reason="compile",
            ) from exc
    if isinstance(target, Pregel):
        return target.copy(update={"checkpointer": checkpointer})
    raise GraphLoadError(
        f"cannot load graph {ref!r}: it is a {type(target).__module__}."
        f"{type(target).__qualname__}, not a StateGraph builder or a compiled graph",
        ref=ref,
        reason="type",
    )


def state_schema(graph: Pregel[Any]) -> type[Any] | None:
    """The state schema of a compiled ``StateGraph`` (``None`` for other graphs)."""
    builder = getattr(graph, "builder", None)
    return builder.state_schema if isinstance(builder, StateGraph) else None


def state_saver(graph: Pregel[Any]) -> BaseCheckpointSaver[Any]:
    """The checkpointer exactly as LangGraph reads ``graph``'s state with it: under
    ``LANGGRAPH_STRICT_MSGPACK``, a copy whose serializer may rebuild the state
    schema's types. Reading checkpoints through it decodes what the graph stored."""
    config: RunnableConfig = {"configurable": {}}
    return graph._state_checkpointer(config)


def _split(ref: object) -> tuple[str, list[str]]:
    if not isinstance(ref, str):
        shown = one_line(repr(ref))
        shown = shown if len(shown) <= _SHOWN else shown[: _SHOWN - 1] + "…"
        raise GraphLoadError(
            f"a graph reference is 'package.module:attr' text, got {type(ref).__name__} {shown}",
            ref=shown,
            reason="ref",
        )
    module_name, sep, attr = ref.partition(":")
    attr_path = attr.split(".")
    if not (
        sep
        and all(part.isidentifier() for part in module_name.split("."))
        and all(part.isidentifier() for part in attr_path)
    ):
        raise GraphLoadError(
            f"graph reference {ref!r} is not of the form 'package.module:attr' "
            "(e.g. 'myapp.agents:graph')",
            ref=ref,
            reason="ref",
        )
    return module_name, attr_path


def _import(ref: str, module_name: str) -> Any:
    # Like `python -m` and ASGI servers: modules in the current directory are found.
    cwd = str(Path.cwd())
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    # A module written since the last import in this process must be found too.
    importlib.invalidate_caches()
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        # Only a miss on the named module (or a package above it) is "not found";
        # a module that exists but imports something missing is an import error.
        if exc.name is not None and (module_name + ".").startswith(exc.name + "."):
            raise GraphLoadError(
                f"cannot load graph {ref!r}: no module named {exc.name!r} (searched the "
                "current directory and sys.path)",
                ref=ref,
                reason="module",
            ) from exc
        raise _import_error(ref, module_name, exc) from exc
    except Exception as exc:
        raise _import_error(ref, module_name, exc) from exc


def _import_error(ref: str, module_name: str, exc: Exception) -> GraphLoadError:
    return GraphLoadError(
        f"cannot load graph {ref!r}: importing {module_name!r} raised {one_line(raised(exc))}",
        ref=ref,
        reason="import",
    )


def _graph_names(module: Any) -> list[str]:
    return sorted(
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and isinstance(value, StateGraph | Pregel)
    )
