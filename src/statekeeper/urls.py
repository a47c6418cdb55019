"""Storage URLs (``scheme://...``) and the one registry of the backends that serve them.

:data:`BACKENDS` is the only place that maps URL schemes to storage backends: both
:func:`statekeeper.checkpointers.open_checkpointer` and
:func:`statekeeper.memory.store.open_store` read it, and a backend's package is imported
only when one of its schemes is opened (so ``import statekeeper`` imports no driver).
:data:`LANGGRAPH_SAVERS` maps the schemes of LangGraph's own savers, which only the
transfers (``copy``, ``export``, ``import``) open.

A leaf module: it imports nothing from statekeeper except :mod:`statekeeper.errors`.
"""

from __future__ import annotations

import importlib
import math
import os
import reprlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import parse_qsl, unquote, urlsplit

from statekeeper.errors import ConfigurationError

__all__ = [
    "BACKENDS",
    "LANGGRAPH_SAVERS",
    "Backend",
    "LangGraphSaver",
    "OptionKind",
    "StorageURL",
    "backend_class",
    "check_option",
    "parse_options",
    "parse_url",
    "redact",
    "schemes",
]


@dataclass(frozen=True)
class Backend:
    """A storage technology: the package ``statekeeper.backends.<name>``, the URL schemes
    it serves, and the names of its classes. The checkpointer class lives in the module
    ``<package>.checkpointer``, the memory store class in ``<package>.store``; each has a
    ``from_url(url, options)`` class method. ``driver`` is the top-level package of the
    third-party driver it needs, installed by the extra ``statekeeper[<name>]``; only the
    backend's own package imports it."""

    name: str
    schemes: tuple[str, ...]
    checkpointer: str | None = None
    store: str | None = None
    driver: str | None = None

    @property
    def package(self) -> str:
        return f"statekeeper.backends.{self.name}"


# One line per backend; a new backend adds its line here (see docs/design.md).
BACKENDS: tuple[Backend, ...] = (
    Backend("sqlite", ("memory", "sqlite"), "SqliteCheckpointer", "SqliteStore"),
    Backend("file", ("file",), "FileCheckpointer", "FileStore"),
    Backend(
        "redis",
        ("redis", "rediss", "redis+cluster", "rediss+cluster"),
        "RedisCheckpointer",
        "RedisStore",
        driver="redis",
    ),
    Backend(
        "postgres",
        ("postgres", "postgresql"),
        "PostgresCheckpointer",
        "PostgresStore",
        driver="psycopg",
    ),
)


@dataclass(frozen=True)
class LangGraphSaver:
    """One of LangGraph's own savers, which ``copy``, ``export`` and ``import`` read and
    write (``open_checkpointer`` does not open them: they are not statekeeper backends).
    ``name`` selects its opener in the transfers; ``module`` is what it imports, from the
    pip package ``package``, which is optional (a missing one is named in the error)."""

    name: str
    schemes: tuple[str, ...]
    module: str
    package: str


# The transfers' schemes for LangGraph's savers (docs/migrating.md).
LANGGRAPH_SAVERS: tuple[LangGraphSaver, ...] = (
    LangGraphSaver(
        "sqlite",
        ("langgraph+sqlite",),
        "langgraph.checkpoint.sqlite",
        "langgraph-checkpoint-sqlite",
    ),
    LangGraphSaver(
        "postgres",
        ("langgraph+postgres", "langgraph+postgresql"),
        "langgraph.checkpoint.postgres",
        "langgraph-checkpoint-postgres",
    ),
)

Component = Literal["checkpointer", "store"]


def schemes(component: Component) -> list[str]:
    """The URL schemes that open a ``component``, in registry order."""
    return [s for b in BACKENDS if getattr(b, component) for s in b.schemes]


def backend_class(
    component: Component, *, scheme: str | None = None, name: str | None = None
) -> Any:
    """The class serving ``component`` for a URL ``scheme``, or the class called ``name``;
    imports its module (and with it the backend's driver) on first use.

    Raises:
        ConfigurationError: the backend's driver is not installed (the message says what
            to install).
        LookupError: no backend serves that scheme, or no class has that name.
    """
    for backend in BACKENDS:
        class_name = getattr(backend, component)
        if class_name and (scheme in backend.schemes or name == class_name):
            try:
                module = importlib.import_module(f"{backend.package}.{component}")
            except ImportError as exc:
                if backend.driver is None or (exc.name or "").split(".")[0] != backend.driver:
                    raise
                raise ConfigurationError(
                    f"{', '.join(s + '://' for s in backend.schemes)} URLs need the "
                    f"{backend.driver} package: pip install 'statekeeper[{backend.name}]'"
                ) from exc
            return getattr(module, class_name)
    raise LookupError(scheme or name)


@dataclass(frozen=True)
class StorageURL:
    """A parsed storage URL.

    ``path`` is the percent-decoded path exactly as written after the authority (for
    ``sqlite:///a.db`` it is ``/a.db``); backends decide what it means.
    """

    raw: str
    scheme: str
    netloc: str
    path: str
    options: dict[str, str] = field(default_factory=dict)


def parse_url(url: str, known_schemes: list[str]) -> StorageURL:
    """Split ``url`` into scheme, authority, path and query options.

    Raises:
        ConfigurationError: ``url`` is not a string, has no ``scheme://``, names a scheme
            not in ``known_schemes``, repeats a query option, or its path holds a NUL
            (``%00``), which no file system, database or server name can.
    """
    known = ", ".join(f"{s}://" for s in known_schemes)
    if not isinstance(url, str) or "://" not in url:
        raise ConfigurationError(
            f"not a storage URL: {redact(url)!r}; expected scheme://..., one of: {known}"
        )
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise ConfigurationError(f"malformed storage URL {redact(url)!r}: {exc}") from exc
    scheme = parts.scheme.lower()
    if scheme not in known_schemes:
        if any(scheme in saver.schemes for saver in LANGGRAPH_SAVERS):
            raise ConfigurationError(
                f"{scheme}:// URLs name LangGraph's own savers, which only copy, export and "
                "import open (statekeeper.transfer.open_saver); copy the threads into one "
                f"of: {known}"
            )
        raise ConfigurationError(
            f"unknown storage scheme {scheme + '://'!r} in {redact(url)!r}; known schemes: {known}"
        )
    options: dict[str, str] = {}
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key in options:
            raise ConfigurationError(f"option {key!r} is given twice in {redact(url)!r}")
        options[key] = value
    path = unquote(parts.path)
    if "\x00" in path:
        raise ConfigurationError(f"a path cannot contain NUL (%00): {redact(url)!r}; remove it")
    return StorageURL(raw=url, scheme=scheme, netloc=parts.netloc, path=path, options=options)


def redact(url: object) -> str:
    """Return ``url`` as text with any password replaced by ``***`` (safe for messages).

    A password holding characters that end the authority when not percent-encoded
    (``#``, ``?``, ``/``) defeats URL parsing, so the fallback hides everything between
    the user name and the last ``@`` after ``scheme://``: more than needed, never less.
    """
    text = str(url)
    try:
        parts = urlsplit(text)
        if parts.password is not None:
            userinfo, _, hostinfo = parts.netloc.rpartition("@")
            user = userinfo.split(":", 1)[0]
            return parts._replace(netloc=f"{user}:***@{hostinfo}").geturl()
    except ValueError:
        pass
    scheme, separator, rest = text.partition("://")
    userinfo, at, after = rest.rpartition("@")
    if not separator or not at or ":" not in userinfo:
        return text
    return f"{scheme}://{userinfo.split(':', 1)[0]}:***@{after}"


# An option's kind: the type its URL text is converted to, or a tuple whose first type is
# that one and whose others a keyword may also be (``(float, NoneType)``: a number, or
# ``None`` as a keyword). ``object`` takes any keyword and no URL text.
OptionKind = type | tuple[type, ...]


def parse_options(
    backend: str,
    known: Mapping[str, OptionKind],
    url_options: Mapping[str, str],
    keyword_options: Mapping[str, Any],
) -> dict[str, Any]:
    """Merge a URL's query options (text, converted to their kind) with keyword options
    (checked against the same kind: a ``bool`` option takes ``True`` or ``False``, an
    ``int`` one a whole number, a ``float`` one a number, never a bool, and both must be
    finite); keywords win. See :data:`OptionKind`.

    Raises:
        ConfigurationError: an option is unknown, or its value is not of its kind (one
            line naming the option, what it got and what it takes).
    """
    merged: dict[str, Any] = {}
    for name, text in url_options.items():
        kinds = _known(backend, known, name)
        merged[name] = _convert(f"{backend} option {name}", kinds[0], text)
    for name, value in keyword_options.items():
        merged[name] = check_option(name, _known(backend, known, name), value, backend)
    return merged


def check_option(name: str, kind: OptionKind, value: Any, backend: str = "") -> Any:
    """``value`` if it is of the option ``name``'s ``kind`` (see :func:`parse_options`;
    ``backend`` names whose option it is, in the message).

    Raises:
        ConfigurationError: it is not.
    """
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if object in kinds:
        return value
    if any(_is(each, value) for each in kinds) and (float not in kinds or _finite(value)):
        return value
    takes = " or ".join(dict.fromkeys(_TAKES.get(k, f"a {k.__name__}") for k in kinds))
    whose = f"{backend} option" if backend else "option"
    raise ConfigurationError(
        f"{whose} {name} must be {takes}, got {_shown(value)} ({type(value).__name__})"
    )


_TAKES: dict[type, str] = {
    bool: "True or False",
    int: "a whole number",
    float: "a finite number",
    str: "text",
    type(None): "None",
    os.PathLike: "a path",
}


def _is(kind: type, value: object) -> bool:
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, kind)


def _finite(value: object) -> bool:
    """Whether ``value`` is not a number, or a number a float holds that is finite."""
    if not isinstance(value, int | float):
        return True
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float
        return False


def _shown(value: object) -> str:
    """``value``'s repr, shortened to one short line."""
    try:
        text = reprlib.repr(value)
    except Exception:  # a hostile __repr__
        text = f"<{type(value).__name__} object>"
    text = " ".join(text.split())
    return text if len(text) <= 80 else text[:77] + "..."


def _known(backend: str, known: Mapping[str, OptionKind], name: str) -> tuple[type, ...]:
    if name not in known:
        raise ConfigurationError(
            f"unknown {backend} option {name!r}; known options: {', '.join(known)}"
        )
    kind = known[name]
    return kind if isinstance(kind, tuple) else (kind,)


def _convert(option: str, kind: type, text: str) -> Any:
    if kind is bool:
        if text.lower() in ("1", "true", "yes", "on"):
            return True
        if text.lower() in ("0", "false", "no", "off"):
            return False
        raise ConfigurationError(f"{option} must be true or false, got {_shown(text)}")
    if kind is int:
        try:
            return int(text)
        except ValueError:
            raise ConfigurationError(
                f"{option} must be a whole number, got {_shown(text)}"
            ) from None
    if kind is float:
        try:
            number = float(text)
        except ValueError:
            raise ConfigurationError(f"{option} must be a number, got {_shown(text)}") from None
        if not math.isfinite(number):
            raise ConfigurationError(f"{option} must be a finite number, got {_shown(text)}")
        return number
    if kind is str:
        return text
    raise ConfigurationError(f"{option} cannot be set in a URL; pass it as a keyword")
