"""The input of a new run, checked against the graph's input schema before anything is
claimed or written: what LangGraph would otherwise drop silently (a key that is not a
channel) or fail on only after the thread's first checkpoint (a value its state schema
refuses) is refused up front, with every problem named by its field."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from typing import Any, NotRequired, Required

import pydantic
from langgraph._internal._typing import MISSING
from langgraph.channels.base import BaseChannel
from langgraph.graph import StateGraph
from langgraph.managed.base import is_managed_value
from langgraph.pregel import Pregel
from typing_extensions import ReadOnly

from statekeeper.errors import InvalidInputError
from statekeeper.graphs.state import one_line

__all__ = ["check_input"]

_VALUE = 40  # widest input value repeated in a problem


def check_input(graph: Pregel[Any], input: Any, *, graph_ref: str | None = None) -> None:
    """Check ``input`` as :meth:`Runner.run` would give it to ``graph`` on a new thread.

    For a compiled ``StateGraph`` whose input schema has fields (a pydantic model, a
    dataclass or a ``TypedDict``), the input must be a mapping whose keys are all fields
    of that schema (LangGraph would drop any other key without a word, whatever the
    model's ``extra`` setting: no channel holds it). Each value is first passed through
    its field's reducer, as LangGraph does (so ``{"role": "user", ...}`` is a message for
    an ``add_messages`` field), then validated:

    - a pydantic model or a dataclass as a whole, as the first node builds it
      (``Schema(**values)``): missing required fields are errors, and the model's own
      configuration decides the rest (``allow_inf_nan``, strictness, validators);
    - a ``TypedDict`` field by field, for the keys given, with pydantic's lax rules:
      LangGraph never validates it, so this only refuses what cannot be meant
      (``"notint"`` for an ``int``); no key is required.

    An instance of the schema itself (a model object), and graphs whose state is one
    value (``StateGraph(list)``) or that are not ``StateGraph``\\ s, are not checked.

    Raises:
        InvalidInputError: one line naming the first problem and counting the others;
            ``errors`` lists every problem found, each with its dotted field path.
    """
    builder = getattr(graph, "builder", None)
    if not isinstance(builder, StateGraph):
        return
    schema = builder.input_schema
    fields = [key for key, value in builder.schemas[schema].items() if not is_managed_value(value)]
    if fields == ["__root__"]:
        return
    if isinstance(input, pydantic.BaseModel) or _is_dataclass_instance(input):
        return
    name = getattr(schema, "__qualname__", repr(schema))
    if not isinstance(input, Mapping):
        raise _error(
            graph_ref,
            name,
            [(None, f"must be an object of {name}'s fields ({_names(fields)}), "
              f"got {type(input).__name__} {_shown(input)}")],
        )  # fmt: skip
    problems: list[tuple[str | None, str]] = [
        (str(key), f"not a field of {name} (its fields: {_names(fields)})")
        for key in input
        if key not in fields
    ]
    reduced: dict[str, Any] = {}
    for key, value in input.items():
        if key in fields:
            try:
                reduced[key] = _reduce(graph, key, value)
            except Exception as exc:
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                problems.append((key, f"its reducer refused {_shown(value)}: {first}"))
    problems += _validate(schema, reduced)
    if problems:
        raise _error(graph_ref, name, problems)


def _reduce(graph: Pregel[Any], key: str, value: Any) -> Any:
    """``value`` as the channel ``key`` holds it after the input is written to a new
    thread: through a fresh copy of the channel, so its reducer runs as in a real run."""
    spec = graph.channels[key]
    if not isinstance(spec, BaseChannel):  # a managed value: not written by an input
        return value
    channel = spec.from_checkpoint(MISSING)
    channel.update([value])
    return channel.get()


def _validate(schema: Any, values: dict[str, Any]) -> list[tuple[str | None, str]]:
    try:
        if isinstance(schema, type) and issubclass(schema, pydantic.BaseModel):
            schema.model_validate(values)
        elif dataclasses.is_dataclass(schema):
            pydantic.TypeAdapter(schema).validate_python(values)
        elif typing.is_typeddict(schema):
            _typed_dict(schema, values)
    except pydantic.ValidationError as exc:
        return [
            (".".join(str(part) for part in error["loc"]) or None, _message(error))
            for error in exc.errors()
        ]
    return []


def _typed_dict(schema: Any, values: dict[str, Any]) -> None:
    """Validate the given keys of a ``TypedDict`` against their field types. A type
    pydantic cannot check (a forward reference that does not resolve, a class pydantic
    has no schema for) is not checked: only LangGraph's own rules apply to it."""
    try:
        hints = typing.get_type_hints(schema, include_extras=True)
    except Exception:
        return
    checked: dict[str, Any] = {}
    for key in values:
        annotation = _unwrap(hints.get(key, Any))
        try:
            pydantic.create_model("_Field", __config__=_LAX, value=(annotation, ...))
        except Exception:  # noqa: S112 - a type pydantic cannot check is left unchecked
            continue
        checked[key] = (annotation, ...)
    model = pydantic.create_model(schema.__name__, __config__=_LAX, **checked)
    model.model_validate({key: values[key] for key in checked})


_LAX = pydantic.ConfigDict(arbitrary_types_allowed=True)


def _unwrap(annotation: Any) -> Any:
    """The type of a ``TypedDict`` field without ``Required``/``NotRequired``/``ReadOnly``
    (which only a ``TypedDict`` understands) and without its reducer."""
    while typing.get_origin(annotation) in (Required, NotRequired, ReadOnly):
        annotation = typing.get_args(annotation)[0]
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = annotation.__origin__
    return annotation


def _message(error: Any) -> str:
    if error["type"] in ("missing", "extra_forbidden"):
        return str(error["msg"])
    return f"{error['msg']} (got {_shown(error['input'])})"


def _error(
    graph_ref: str | None, name: str, problems: list[tuple[str | None, str]]
) -> InvalidInputError:
    """One line: the first problem, and how many more there are (``errors`` lists all)."""
    of = f" of graph {graph_ref!r}" if graph_ref else ""
    listed = tuple((path, one_line(text)) for path, text in problems)
    path, text = listed[0]
    first = f"{path}: {text}" if path else text
    more = f" (and {len(listed) - 1} more)" if len(listed) > 1 else ""
    return InvalidInputError(
        f"the input{of} does not fit {name}; nothing was run or written: {first}{more}",
        field=path,
        errors=listed,
    )


def _names(fields: list[str]) -> str:
    return ", ".join(fields) if fields else "none"


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _VALUE else text[: _VALUE - 1] + "…"


def _is_dataclass_instance(value: Any) -> bool:
    return dataclasses.is_dataclass(value) and not isinstance(value, type)
