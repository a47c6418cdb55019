"""File names for the file checkpointer: any unicode id -> one safe, reversible name.

:func:`encode_name` maps text to a name made only of ``a-z 0-9 - _ . ~ ^``:

* ``a-z``, ``0-9``, ``-`` and ``_`` stand for themselves;
* an upper-case ASCII letter is ``^`` and its lower-case form (``"ABC"`` -> ``"^a^b^c"``), so
  names never differ only by case and a case-insensitive file system cannot merge two ids;
* ``.`` stands for itself except first or last (so no name is ``.``, ``..``, hidden, or
  ends in a dot, which Windows drops);
* every other character is ``~`` and two lower-case hex digits per UTF-8 byte
  (``"é"`` -> ``"~c3~a9"``, ``"/"`` -> ``"~2f"``, NUL -> ``"~00"``): no separator, NUL or
  non-ASCII character (whose case folding or normalisation a file system might apply)
  reaches the file system;
* a name whose part before the first ``.`` is a Windows device name (``con``, ``nul``,
  ``com1``...) has its first character escaped (``"nul"`` -> ``"~6eul"``);
* the empty text is ``~``.

:func:`decode_name` is the exact inverse and accepts canonical names only, so stray files
(``.DS_Store``...) are never mistaken for ids. :func:`file_name` caps the length: a name
longer than :data:`NAME_LIMIT` becomes a readable prefix, ``~~`` and the SHA-256 of the
full id (``~~`` never occurs in a full name). Such a name is not reversible by itself, so
every record and index also stores its full ids, and readers check them.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re

__all__ = [
    "NAME_LIMIT",
    "decode_name",
    "encode_name",
    "file_name",
    "is_hashed",
    "value_file_name",
    "version_name",
]

NAME_LIMIT = 120  # bytes: a value file name (two of these and "@") stays under 255
_HASHED = "~~"
_LITERAL = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_")
_RESERVED = frozenset(
    ["con", "prn", "aux", "nul", *(f"com{i}" for i in range(10)), *(f"lpt{i}" for i in range(10))]
)
_CANONICAL = re.compile(r"[a-z0-9._~^-]+")


def encode_name(text: str) -> str:
    """The full, reversible name of ``text`` (see the module docstring). It may be long:
    use :func:`file_name` for a name that fits a file system.

    Raises:
        UnicodeEncodeError: ``text`` holds a lone surrogate (ids are validated before).
    """
    if not text:
        return "~"
    last = len(text) - 1
    parts: list[str] = []
    for i, ch in enumerate(text):
        if ch in _LITERAL:
            parts.append(ch)
        elif "A" <= ch <= "Z":
            parts.append("^" + ch.lower())
        elif ch == "." and 0 < i < last:
            parts.append(ch)
        else:
            parts.extend(f"~{byte:02x}" for byte in ch.encode("utf-8"))
    name = "".join(parts)
    if name.split(".", 1)[0] in _RESERVED:
        name = f"~{ord(name[0]):02x}{name[1:]}"
    return name


def decode_name(name: str) -> str:
    """The text :func:`encode_name` made ``name`` from.

    Raises:
        ValueError: ``name`` is not a canonical full name (a stray file, a hashed name).
    """
    if name == "~":
        return ""
    if not _CANONICAL.fullmatch(name) or _HASHED in name:
        raise ValueError(f"not an encoded name: {name!r}")
    raw = bytearray()
    i = 0
    try:
        while i < len(name):
            ch = name[i]
            if ch == "~":
                raw.append(int(name[i + 1 : i + 3], 16) if len(name) >= i + 3 else 256)
                i += 3
            elif ch == "^":
                raw.extend(name[i + 1 : i + 2].upper().encode("ascii"))
                i += 2
            else:
                raw.append(ord(ch))
                i += 1
        text = raw.decode("utf-8")
    except ValueError:  # a bad escape, or bytes that are not UTF-8
        raise ValueError(f"not an encoded name: {name!r}") from None
    if encode_name(text) != name:
        raise ValueError(f"not a canonical encoded name: {name!r}")
    return text


@functools.lru_cache(maxsize=1024)  # thread, namespace and channel names repeat constantly
def file_name(text: str, limit: int = NAME_LIMIT) -> str:
    """``encode_name(text)`` when it has at most ``limit`` characters; otherwise a prefix
    of it, ``~~`` and the SHA-256 (hex) of ``text``: distinct ids get distinct names."""
    name = encode_name(text)
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    prefix = name[: max(0, limit - len(_HASHED) - len(digest))]
    # never end the prefix inside an escape ("~h", "~", "^"): keep it readable
    for marker, width in (("~", 3), ("^", 2)):
        at = prefix.rfind(marker, max(0, len(prefix) - width + 1))
        if at != -1:
            prefix = prefix[:at]
    return f"{prefix}{_HASHED}{digest}"


def is_hashed(name: str) -> bool:
    """Whether ``name`` is a shortened name whose id must be read from the stored data."""
    return _HASHED in name


def version_name(version: object) -> str:
    """The name of a channel version: a string version is :func:`file_name` of itself,
    any other (LangGraph's savers also use ints and floats) is ``=`` and its JSON, so
    ``"1"``, ``1`` and ``1.0`` get distinct names (``=`` never occurs in an encoded name)."""
    if isinstance(version, str):
        return file_name(version)
    return "=" + json.dumps(version)


def value_file_name(channel: str, version: object) -> str:
    """The file holding ``channel``'s value at one version: ``<channel>@<version>``."""
    return f"{file_name(channel)}@{version_name(version)}"
