"""Terminal output: aligned tables, JSON for anything stored, a progress bar.

Shared by the CLI and text reports (``statekeeper.memory.eval.render``). Nothing here
decides what to show; the callers do. Output goes to stdout, progress and diagnostics to
stderr, so ``--json`` output can always be piped.

Stored text is anyone's text: a thread id may hold a newline, a terminal escape or a
right-to-left override (U+202E) that would make a table lie about what it shows. Every
table cell goes through :func:`escape`, and :func:`dumps` writes the same characters as
JSON escapes (the value parsed back is unchanged).
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import decimal
import enum
import json
import os
import sys
import unicodedata
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO

__all__ = ["Progress", "dumps", "escape", "is_terminal", "jsonable", "table"]

_CELL = 60  # widest table cell before it is cut with an ellipsis


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON data, for display: messages keep their type, content,
    id and tool calls; models and data classes become their fields; bytes become base64;
    UUIDs and decimals their text; anything else unknown its ``repr``."""
    for applies, convert in _CONVERSIONS:
        if applies(value):
            return convert(value)
    return repr(value)


def _instance_of(*kinds: type) -> Callable[[Any], bool]:
    return lambda value: isinstance(value, kinds)


def _is_model(value: Any) -> bool:
    """A pydantic model. Asked of ``sys.modules`` rather than imported here: no value can
    be one unless pydantic is loaded already, and the CLI's start stays free of it."""
    pydantic = sys.modules.get("pydantic")
    return pydantic is not None and isinstance(value, pydantic.BaseModel)


def _is_message(value: Any) -> bool:
    return hasattr(value, "content") and hasattr(value, "type")  # a LangChain message


def _message(value: Any) -> dict[str, Any]:
    shown = {"type": value.type, "content": jsonable(value.content)}
    for key in ("id", "name", "tool_calls", "tool_call_id"):
        if getattr(value, key, None):
            shown[key] = jsonable(getattr(value, key))
    return shown


def _is_dataclass_instance(value: Any) -> bool:
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


def _fields(value: Any) -> Any:
    return jsonable({f.name: getattr(value, f.name) for f in dataclasses.fields(value)})


# the first that applies converts: the order decides, e.g. a LangChain message is a
# pydantic model but shows as a message, and a named tuple is a list
_CONVERSIONS: tuple[tuple[Callable[[Any], bool], Callable[[Any], Any]], ...] = (
    (_instance_of(type(None), str, int, float, bool), lambda value: value),
    (
        _instance_of(Mapping),
        lambda value: {str(key): jsonable(item) for key, item in value.items()},
    ),
    (_instance_of(list, tuple, set, frozenset), lambda value: [jsonable(i) for i in value]),
    (_is_message, _message),
    (_is_model, lambda value: jsonable(value.model_dump(mode="python"))),
    (_is_dataclass_instance, _fields),
    (
        _instance_of(datetime.datetime, datetime.date, datetime.time),
        lambda value: value.isoformat(),
    ),
    (_instance_of(enum.Enum), lambda value: jsonable(value.value)),
    # their text is exact and standard: the repr (UUID('...')) only adds noise
    (_instance_of(uuid.UUID, decimal.Decimal), str),
    (_instance_of(os.PathLike), os.fspath),
    (_instance_of(bytes), lambda value: {"base64": base64.b64encode(value).decode()}),
    (lambda value: hasattr(value, "_asdict"), lambda value: jsonable(value._asdict())),
)


def dumps(value: Any, *, indent: int | None = 2) -> str:
    """``value`` as JSON text (through :func:`jsonable`), unicode kept readable except
    the characters :func:`escape` escapes, written as ``\\uXXXX`` escapes."""
    text = json.dumps(jsonable(value), indent=indent, ensure_ascii=False)
    if text.isascii() and "\x7f" not in text:
        return text
    # json.dumps escaped every character below U+0020 inside strings (those left are
    # the indentation's newlines); outside strings JSON text is ASCII, so only the
    # contents of strings change
    return "".join(
        json.dumps(char)[1:-1] if char >= " " and _unsafe(char) else char for char in text
    )


# the zero-width joiners are part of how some scripts and emoji are written
_JOINERS = frozenset("\u200c\u200d")
# control, format (bidi overrides and isolates, zero-width spaces...), surrogate and
# line/paragraph separator characters: what changes how a terminal shows the rest
_UNSAFE = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escape(text: str) -> str:
    """``text`` with every control, format, surrogate and line-separator character
    (newlines, terminal escapes, U+202E and the other bidi controls, zero-width
    spaces) written as a visible escape (``\\n``, ``\\x1b``, ``\\u202e``), so what a
    terminal shows is what is stored, in order. Other characters are kept as they are."""
    if text.isprintable():  # the fast path: none of those is printable
        return text
    return "".join(_escaped(char) if _unsafe(char) else char for char in text)


def _unsafe(char: str) -> bool:
    return unicodedata.category(char) in _UNSAFE and char not in _JOINERS


def _escaped(char: str) -> str:
    code = ord(char)
    if char in _NAMED:
        return _NAMED[char]
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Rows as left-aligned columns under upper-case headers; long cells are cut."""
    cells = [[_cell(item) for item in row] for row in rows]
    widths = [
        max([len(header), *(len(row[i]) for row in cells)]) for i, header in enumerate(headers)
    ]
    lines = [[header.upper() for header in headers], *cells]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


def _cell(value: Any) -> str:
    text = "-" if value is None or value == "" else escape(str(value))
    return text if len(text) <= _CELL else text[: _CELL - 1] + "…"


def is_terminal(stream: TextIO | None = None) -> bool:
    """Whether ``stream`` (default: stderr) is a terminal; a closed or detached stream is not."""
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


class Progress:
    """A progress bar on ``stream`` (stderr), drawn by tqdm, only when ``enabled`` (by
    default: when ``stream`` is a terminal), so logs and pipes stay clean. Call
    :meth:`update` as work advances and :meth:`done` at the end. tqdm is imported only
    when a bar is drawn."""

    def __init__(
        self, label: str, stream: TextIO | None = None, *, enabled: bool | None = None
    ) -> None:
        self.label = label
        self.stream = stream or sys.stderr
        self.enabled = is_terminal(self.stream) if enabled is None else enabled
        self._bar: Any = None

    def update(self, done: int, total: int | None, detail: str = "") -> None:
        if not self.enabled:
            return
        if self._bar is None:
            from tqdm import tqdm

            self._bar = tqdm(
                desc=self.label,
                total=total,
                file=self.stream,
                leave=False,  # wiped when done: the command's summary line comes next
                # the size said once: a pseudo-terminal of size 0x0 (some are) would
                # otherwise get an empty bar, or none at all
                ncols=_size(self.stream).columns or 80,
                nrows=_size(self.stream).lines or 24,
                bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]",
            )
        bar = self._bar
        bar.total = total or None
        bar.n = done
        bar.set_postfix_str(escape(detail), refresh=False)
        bar.refresh()

    def done(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def _size(stream: TextIO) -> os.terminal_size:
    """The size of the terminal ``stream`` is on; 0x0 when it does not say."""
    try:
        return os.get_terminal_size(stream.fileno())
    except (AttributeError, ValueError, OSError):
        return os.terminal_size((0, 0))
