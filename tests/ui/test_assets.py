"""What the inspector's pages load: only files shipped in the package, each listed with
its version, licence and checksum in ``static/LICENSES.md``; nothing from another site."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import statekeeper.ui

PACKAGE = Path(statekeeper.ui.__file__).parent
STATIC = PACKAGE / "static"
TEMPLATES = PACKAGE / "templates"
LICENSES = (STATIC / "LICENSES.md").read_text(encoding="utf-8")


def _table() -> dict[str, list[str]]:
    rows = re.findall(r"^\| `([^`]+)` \|(.+)\|$", LICENSES, re.MULTILINE)
    return {name: [cell.strip() for cell in rest.split("|")] for name, rest in rows}


def test_every_static_file_is_listed_with_its_version_and_licence() -> None:
    table = _table()
    shipped = {path.name for path in STATIC.iterdir() if path.name != "LICENSES.md"}
    assert shipped == set(table)
    for name, cells in table.items():
        assert all(cells), f"{name}: every column filled"
        assert len(cells) == 4, name


def test_the_vendored_htmx_is_the_pinned_release_unchanged() -> None:
    _, version, licence, source = _table()["htmx.min.js"]
    data = (STATIC / "htmx.min.js").read_bytes()
    assert f'version:"{version}"'.encode() in data
    assert licence.startswith("BSD Zero Clause")
    assert f"sha256 `{hashlib.sha256(data).hexdigest()}`" in source
    assert f"htmx.org@{version}" in source
    assert f"## htmx.org {version} — Zero-Clause BSD" in LICENSES


def test_pages_load_nothing_from_another_site() -> None:
    for path in [*TEMPLATES.glob("*.html"), STATIC / "style.css"]:
        text = path.read_text(encoding="utf-8")
        loads = re.findall(r"""(?:src|href|action)\s*=\s*["']([^"'{]+)""", text)
        if path.suffix == ".css":
            loads += re.findall(r"url\(([^)]*)\)", text) + re.findall(r"@import\s+([^;]+)", text)
        outside = [link for link in loads if not link.startswith(("/", "#"))]
        assert outside == [], f"{path.name} loads {outside}"
