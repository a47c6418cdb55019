"""Edited state for a fork (``Runner.fork(values=...)``), checked before anything is
written: every key must be a channel of the graph's state, and every value must fit the
type its schema declares."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from typing import Any

import pydantic
from langgraph.graph import StateGraph
from langgraph.pregel import Pregel

from statekeeper.errors import StateValidationError
from statekeeper.graphs._checkpoints import is_state_channel
from statekeeper.graphs._input import _LAX, _shown, _unwrap
from statekeeper.graphs.loading import state_schema
from statekeeper.graphs.state import invalid_state, raised, validate

__all__ = ["edited_values", "state_channels"]

_SHOWN = 5  # unknown keys named in the message; the rest are counted


def edited_values(
    graph: Pregel[Any], values: Any, *, thread_id: str, checkpoint_id: str
) -> dict[str, Any]:
    """``values``, the edited state of a fork of ``checkpoint_id``, as the fork stores
    them; refused with a one-line :class:`StateValidationError` otherwise:

    - ``values`` is a mapping whose every key is a channel of the graph's state: a field
      of its state schema, or of a node's own (private) schema. LangGraph's channels
      (``__start__``, ``branch:to:...``), managed values and unknown keys are refused.
    - A pydantic state schema validates its fields as a whole (``model_validate``:
      required fields must be given) and each is stored as the model holds it, so a
      message given as JSON is stored as a message.
    - Any other value (of a ``TypedDict`` or dataclass state, or of a private channel)
      is checked alone against its declared type with pydantic's lax rules, and stored
      as given: LangGraph neither validates nor converts such state. A type pydantic
      cannot check is not checked. Of a dataclass state, the fields without a default
      must be given (a node builds the dataclass from them); no other key is required.
    """
    where = f"the edited state for a fork of thread {thread_id!r} at checkpoint {checkpoint_id!r}"
    ids: dict[str, Any] = {"where": where, "thread_id": thread_id, "checkpoint_id": checkpoint_id}
    if not isinstance(values, Mapping):
        raise StateValidationError(
            f"{where} must map channel names to values, not be {type(values).__name__}",
            thread_id=thread_id,
            checkpoint_id=checkpoint_id,
        )
    schema = state_schema(graph)
    hints = state_channels(graph)
    _known_keys(schema, hints, values, **ids)
    edited = dict(values)
    rest = list(edited)
    if isinstance(schema, type) and issubclass(schema, pydantic.BaseModel):
        fields = {key: value for key, value in edited.items() if key in schema.model_fields}
        model = validate(schema, fields, **ids)
        edited.update((key, getattr(model, key)) for key in fields)
        rest = [key for key in edited if key not in fields]
    elif dataclasses.is_dataclass(schema):
        missing = [name for name in _required(schema) if name not in edited]
        if missing:
            raise invalid_state(schema, missing[0], "Field required", **ids)
    for key in rest:
        problem = _misfit(hints[key], edited[key])
        if problem is not None:
            path, text = problem
            raise invalid_state(schema, ".".join([key, *path]), text, **ids)
    return edited


def _known_keys(
    schema: Any,
    hints: Mapping[str, Any],
    values: Mapping[Any, Any],
    *,
    where: str,
    thread_id: str,
    checkpoint_id: str,
) -> None:
    """Refuse ``values`` when a key is not a channel the edit may set."""
    unknown = [key for key in values if key not in hints]
    if not unknown:
        return
    named = ", ".join(_shown(key) for key in unknown[:_SHOWN])
    if len(unknown) > _SHOWN:
        named += f" (and {len(unknown) - _SHOWN} more)"
    has = ", ".join(repr(key) for key in hints) or "none"
    state = getattr(schema, "__qualname__", None) or "the graph's state"
    raise StateValidationError(
        f"{where} has keys that are not channels of {state}: {named} (it has: {has})",
        thread_id=thread_id,
        checkpoint_id=checkpoint_id,
        field=str(unknown[0]),
    )


def _required(schema: Any) -> list[str]:
    """The fields of a dataclass that its constructor requires."""
    return [
        field.name
        for field in dataclasses.fields(schema)
        if field.init
        and field.default is dataclasses.MISSING
        and field.default_factory is dataclasses.MISSING
    ]


def state_channels(graph: Pregel[Any]) -> dict[str, Any]:
    """The channels an edit may set, each with its declared type (``Any`` when none is
    known): the state schema's fields first, then those of the nodes' own schemas. A
    graph that is not a ``StateGraph`` has the state channels a checkpoint shows."""
    builder = getattr(graph, "builder", None)
    if not isinstance(builder, StateGraph):
        return {key: Any for key in graph.channels if is_state_channel(key)}
    hints: dict[str, Any] = {}
    for schema in (builder.state_schema, *builder.schemas):
        try:
            declared = typing.get_type_hints(schema, include_extras=True)
        except Exception:
            declared = {}
        for key in builder.schemas.get(schema, {}):
            if key in builder.channels:  # not a managed value
                hints.setdefault(key, declared.get(key, Any))
    return hints


def _misfit(annotation: Any, value: Any) -> tuple[list[str], str] | None:
    """Why ``value`` does not fit ``annotation`` (the path within it, and the problem),
    by pydantic's lax rules; ``None`` when it fits or pydantic cannot check the type."""
    adapter = _adapter(_unwrap(annotation))
    if adapter is None:
        return None
    try:
        adapter.validate_python(value)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        more = exc.error_count() - 1
        text = str(first["msg"]) + (f" (and {more} more errors)" if more else "")
        return [str(part) for part in first["loc"]], text
    except Exception as exc:  # a validator or discriminator that raised something else
        return [], raised(exc)
    return None


def _adapter(annotation: Any) -> pydantic.TypeAdapter[Any] | None:
    """A lax validator of ``annotation`` (arbitrary classes checked with ``isinstance``;
    a model, dataclass or ``TypedDict`` by its own configuration), or ``None``."""
    for config in (_LAX, None):
        try:
            return pydantic.TypeAdapter(annotation, config=config)
        except Exception:  # noqa: S112 - config refused (a type with its own), or uncheckable
            continue
    return None
