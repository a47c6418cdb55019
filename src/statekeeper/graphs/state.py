"""``VersionedState``: a pydantic graph state that knows its schema version and how to
upgrade state stored under older versions.

>>> class Ticket(VersionedState):
...     schema_version: ClassVar[int] = 2
...     messages: Annotated[list[AnyMessage], add_messages] = []
...     priority: int
...
>>> @Ticket.migration(from_version=1)
... def priority_to_int(values: dict[str, Any]) -> dict[str, Any]:
...     return {**values, "priority": {"low": 1, "high": 3}[values["priority"]]}

The class is used unchanged as a LangGraph ``StateGraph`` state schema: every field is a
channel (reducers such as ``add_messages`` keep working) and ``schema_version`` is not.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, ClassVar, Self, TypeVar

import pydantic

from statekeeper.errors import ConfigurationError, StateValidationError

__all__ = [
    "Migration",
    "VersionedState",
    "invalid_state",
    "named_keys",
    "one_line",
    "raised",
    "state_error",
    "validate",
]

M = TypeVar("M", bound=pydantic.BaseModel)

Migration = Callable[[dict[str, Any]], dict[str, Any]]
"""Upgrades the stored values of one version to the next; returns the new values."""


class VersionedState(pydantic.BaseModel):
    """Base class of a graph state with a schema version and migrations.

    ``schema_version`` (a class attribute, default 1) is the version this code writes.
    Each migration upgrades the values stored under one version to the next, so a state
    stored under any older version can be brought up to date one step at a time.
    Migrations belong to the class they are registered on; subclasses do not inherit them.
    """

    schema_version: ClassVar[int] = 1
    _migrations: ClassVar[dict[int, Migration]] = {}

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        _hide_class_vars(cls)
        if not isinstance(cls.schema_version, int) or cls.schema_version < 1:
            raise ConfigurationError(
                f"{cls.__qualname__}.schema_version must be an int >= 1, got {cls.schema_version!r}"
            )
        cls._migrations = {}

    @classmethod
    def migration(cls, *, from_version: int) -> Callable[[Migration], Migration]:
        """Register the decorated function as the upgrade from ``from_version`` to
        ``from_version + 1``. It receives the stored values (a new dict it may change)
        and returns the values of the next version; raising rejects the state.

        Raises:
            ConfigurationError: ``from_version`` is not below ``schema_version``, or a
                migration from it is already registered.
        """
        if not 1 <= from_version < cls.schema_version:
            raise ConfigurationError(
                f"{cls.__qualname__} is at schema version {cls.schema_version}: a migration "
                f"from version {from_version} must start at 1 to "
                f"{cls.schema_version - 1}"
            )
        if from_version in cls._migrations:
            raise ConfigurationError(
                f"{cls.__qualname__} already has a migration from version {from_version}"
            )

        def register(func: Migration) -> Migration:
            cls._migrations[from_version] = func
            return func

        return register

    @classmethod
    def upgrade(
        cls,
        values: Mapping[str, Any],
        from_version: int,
        *,
        thread_id: str | None = None,
        checkpoint_id: str | None = None,
    ) -> dict[str, Any]:
        """``values`` stored under ``from_version``, run through every migration up to
        ``schema_version`` (unchanged when already current). Not validated; ``values``
        itself is never modified.

        Raises:
            StateValidationError: a migration is missing or raised, or ``from_version``
                is newer than this code (the error names the thread and checkpoint given).
        """
        where = _where(thread_id, checkpoint_id)
        if from_version > cls.schema_version:
            raise StateValidationError(
                f"{where} was written under schema version {from_version} of "
                f"{cls.__qualname__}, newer than this code's version {cls.schema_version}; "
                "run it with the code that wrote it",
                thread_id=thread_id,
                checkpoint_id=checkpoint_id,
            )
        current = dict(values)
        for version in range(from_version, cls.schema_version):
            step = cls._migrations.get(version)
            if step is None:
                raise StateValidationError(
                    f"{where} is at schema version {from_version} of {cls.__qualname__}, "
                    f"but no migration from version {version} to {version + 1} is "
                    f"registered; add one with @{cls.__qualname__}.migration("
                    f"from_version={version})",
                    thread_id=thread_id,
                    checkpoint_id=checkpoint_id,
                )
            try:
                upgraded = step(dict(current))
            except Exception as exc:
                raise StateValidationError(
                    f"{where}: migration {step.__qualname__} from version {version} to "
                    f"{version + 1} failed: {one_line(raised(exc))}",
                    thread_id=thread_id,
                    checkpoint_id=checkpoint_id,
                ) from exc
            if not isinstance(upgraded, Mapping):
                raise StateValidationError(
                    f"{where}: migration {step.__qualname__} returned "
                    f"{type(upgraded).__name__}, not a dict",
                    thread_id=thread_id,
                    checkpoint_id=checkpoint_id,
                )
            current = dict(upgraded)
        return current

    @classmethod
    def load(
        cls,
        values: Mapping[str, Any],
        from_version: int,
        *,
        thread_id: str | None = None,
        checkpoint_id: str | None = None,
        channels: Collection[str] = (),
    ) -> tuple[Self, dict[str, Any]]:
        """Upgrade ``values`` (see :meth:`upgrade`) and validate them: the state, and
        the upgraded values (as validated) of the keys the migrations returned.

        When a migration ran, every key the last one returned must be a field of this
        class or one of ``channels`` (the graph's other state channels: a node's private
        state); the upgraded values are stored as the state's channels, so a key that is
        neither (a misspelled field, a removed one the migration kept) is refused, as
        ``Runner.fork(values=...)`` refuses it, rather than stored as a channel no field
        reads. Values already at ``schema_version`` are not checked so.

        Raises:
            StateValidationError: the values cannot be upgraded, a migration returned
                keys that are not channels of the state (the error names the migration
                and the keys), or they do not validate; the error names the first
                invalid field.
        """
        upgraded = cls.upgrade(
            values, from_version, thread_id=thread_id, checkpoint_id=checkpoint_id
        )
        if from_version < cls.schema_version:
            known = set(cls.model_fields) | set(channels)
            unknown = [key for key in upgraded if key not in known]
            if unknown:
                last = cls._migrations[cls.schema_version - 1]
                raise StateValidationError(
                    f"{_where(thread_id, checkpoint_id)}: migration {last.__qualname__} "
                    f"from version {cls.schema_version - 1} to {cls.schema_version} "
                    f"returned keys that are not channels of {cls.__qualname__}: "
                    f"{named_keys(unknown)} (it has: {named_keys(sorted(known), limit=None)}); "
                    "drop or rename them in the migration",
                    thread_id=thread_id,
                    checkpoint_id=checkpoint_id,
                    field=str(unknown[0]),
                )
        state = validate(cls, upgraded, thread_id=thread_id, checkpoint_id=checkpoint_id)
        fields = type(state).model_fields
        return state, {
            key: getattr(state, key) if key in fields else value for key, value in upgraded.items()
        }


def validate(
    schema: type[M],
    values: Mapping[str, Any],
    *,
    thread_id: str | None = None,
    checkpoint_id: str | None = None,
    where: str | None = None,
) -> M:
    """``schema.model_validate(values)``, its failure as :class:`StateValidationError`
    (one line naming ``where`` the state is, default its thread and checkpoint, and the
    first invalid field).

    Whatever validating raises is a failure: pydantic reports a validator's
    ``ValueError`` or ``AssertionError`` as a ``ValidationError`` but lets any other
    exception through (langchain's message union raises ``TypeError`` for a message
    without a ``type``). The field named is then the first given that fails alone.
    """
    given = dict(values)
    place = where if where is not None else _where(thread_id, checkpoint_id)
    try:
        return schema.model_validate(given)
    except pydantic.ValidationError as exc:
        raise state_error(exc, schema, thread_id, checkpoint_id, where=place) from exc
    except Exception as exc:
        field = next(
            (key for key in given if _fails_alone(schema.model_validate, key, given[key], exc)),
            None,
        )
        raise invalid_state(
            schema,
            field,
            raised(exc),
            where=place,
            thread_id=thread_id,
            checkpoint_id=checkpoint_id,
        ) from exc


def state_error(
    exc: pydantic.ValidationError,
    schema: type[Any],
    thread_id: str | None,
    checkpoint_id: str | None,
    *,
    where: str | None = None,
) -> StateValidationError:
    """The error for state that failed validation against ``schema``: it names the
    thread, the checkpoint (or ``where``) and the dotted path of the first invalid field."""
    first = exc.errors()[0]
    field = ".".join(str(part) for part in first["loc"]) or None
    more = exc.error_count() - 1
    return invalid_state(
        schema,
        field,
        str(first["msg"]) + (f" (and {more} more errors)" if more else ""),
        where=where if where is not None else _where(thread_id, checkpoint_id),
        thread_id=thread_id,
        checkpoint_id=checkpoint_id,
    )


def invalid_state(
    schema: Any,
    field: str | None,
    problem: str,
    *,
    where: str,
    thread_id: str | None,
    checkpoint_id: str | None,
) -> StateValidationError:
    """The error for state (``where``: which) that does not fit ``schema``, one line:
    the schema (and its version), the field's dotted path, and ``problem`` (its line
    breaks as spaces)."""
    version = getattr(schema, "schema_version", None)
    name = getattr(schema, "__qualname__", None) or repr(schema)
    against = name + (f" (schema version {version})" if version else "")
    return StateValidationError(
        f"{where} does not validate against {against}: field {field!r}: {one_line(problem)}",
        thread_id=thread_id,
        checkpoint_id=checkpoint_id,
        field=field,
    )


def raised(exc: BaseException) -> str:
    """``exc`` as a problem: its type and its message."""
    return f"{type(exc).__name__}: {exc}"


def named_keys(keys: Sequence[object], *, limit: int | None = 5) -> str:
    """``keys`` as a message names them, each as its ``repr`` (a long one cut short):
    the first ``limit`` (``None``: all) and how many more; ``"none"`` when empty."""
    shown = [_cut(repr(key)) for key in (keys if limit is None else keys[:limit])]
    text = ", ".join(shown) or "none"
    if limit is not None and len(keys) > limit:
        text += f" (and {len(keys) - limit} more)"
    return one_line(text)


def _cut(text: str, width: int = 40) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def one_line(text: str) -> str:
    """``text`` with every run of whitespace (line breaks included) as one space."""
    return " ".join(text.split())


def _fails_alone(check: Callable[[Any], Any], key: str, value: Any, exc: Exception) -> bool:
    """Whether validating ``{key: value}`` alone raises what validating all raised."""
    try:
        check({key: value})
    except Exception as alone:
        return type(alone) is type(exc)
    return False


def _where(thread_id: str | None, checkpoint_id: str | None) -> str:
    if thread_id is None:
        return "the state"
    if checkpoint_id is None:
        return f"the state of thread {thread_id!r}"
    return f"the state of thread {thread_id!r} at checkpoint {checkpoint_id!r}"


# The class variables VersionedState declares: configuration, not state.
_OWN_CLASS_VARS = ("schema_version", "_migrations")


def _hide_class_vars(cls: type) -> None:
    # LangGraph makes a channel of every annotated name of a state schema, ClassVars
    # included; pydantic has already recorded these as class variables, so dropping
    # their annotations keeps them out of the graph's channels and changes nothing else.
    own = cls.__dict__.get("__annotations__")  # noqa: RUF063 - the class's own dict, to edit
    if isinstance(own, dict):
        for name in _OWN_CLASS_VARS:
            own.pop(name, None)


_hide_class_vars(VersionedState)
