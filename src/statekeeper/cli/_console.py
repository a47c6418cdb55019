"""Terminal output for the CLI: aligned tables, JSON for anything stored, a progress bar.

Nothing here decides what to show; :mod:`statekeeper.cli` does. Output goes to stdout,
progress and diagnostics to stderr, so ``--json`` output can always be piped.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import enum
import json
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from pydantic import BaseModel

__all__ = ["Progress", "dumps", "jsonable", "table"]

_CELL = 60  # widest table cell before it is cut with an ellipsis


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON data, for display: messages keep their type, content,
    id and tool calls; models and data classes become their fields; bytes become base64;
    anything else unknown its ``repr``."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, Mapping):
        return {str(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(item) for item in value]
    if hasattr(value, "content") and hasattr(value, "type"):  # a LangChain message
        shown = {"type": value.type, "content": jsonable(value.content)}
        for key in ("id", "name", "tool_calls", "tool_call_id"):
            if getattr(value, key, None):
                shown[key] = jsonable(getattr(value, key))
        return shown
    if isinstance(value, BaseModel):
        return jsonable(value.model_dump(mode="python"))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return jsonable({f.name: getattr(value, f.name) for f in dataclasses.fields(value)})
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, enum.Enum):
        return jsonable(value.value)
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, bytes):
        return {"base64": base64.b64encode(value).decode()}
    if hasattr(value, "_asdict"):
        return jsonable(value._asdict())
    return repr(value)


def dumps(value: Any, *, indent: int | None = 2) -> str:
    """``value`` as JSON text (through :func:`jsonable`), unicode kept readable."""
    return json.dumps(jsonable(value), indent=indent, ensure_ascii=False)


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
    text = "-" if value is None or value == "" else str(value)
    text = text.replace("\n", " ")
    return text if len(text) <= _CELL else text[: _CELL - 1] + "…"


class Progress:
    """A one-line progress bar on ``stream`` (stderr), drawn only when it is a terminal,
    so logs and pipes stay clean. Call :meth:`update` as work advances and :meth:`done`
    at the end."""

    def __init__(self, label: str, stream: TextIO | None = None) -> None:
        self.label = label
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty()
        self._drawn = False

    def update(self, done: int, total: int | None, detail: str = "") -> None:
        if not self.enabled:
            return
        if total:
            filled = int(20 * min(done, total) / total)
            bar = f"[{'#' * filled}{'.' * (20 - filled)}] {done}/{total}"
        else:
            bar = f"{done}"
        self.stream.write(f"\r{self.label} {bar} {detail}".ljust(79)[:120])
        self.stream.flush()
        self._drawn = True

    def done(self) -> None:
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False
