"""The shape of the source tree (docs/design.md): small modules, small rooms, and private
modules used only inside the package that holds them. The dependency direction between
rooms is checked by import-linter (``lint-imports``, contracts in pyproject.toml)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from statekeeper.urls import BACKENDS, LANGGRAPH_SAVERS

SRC = Path(__file__).resolve().parents[1] / "src"
MODULES = sorted(SRC.rglob("*.py"))
MAX_LINES = 500
MAX_MODULES_PER_FOLDER = 12
SAVERS_PACKAGE = "statekeeper.transfer._savers"  # LangGraph's savers opened by the transfers


def _dotted(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _package(path: Path) -> str:
    dotted = _dotted(path)
    return dotted if path.name == "__init__.py" else dotted.rpartition(".")[0]


def _imported(path: Path, root: str = "statekeeper") -> set[str]:
    """Every module under ``root`` that ``path`` imports, by dotted name (``from a import
    b`` counts ``a.b`` when ``b`` is a module)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            for alias in node.names:
                candidate = SRC.joinpath(*node.module.split("."), alias.name)
                if candidate.with_suffix(".py").exists() or candidate.is_dir():
                    found.add(f"{node.module}.{alias.name}")
    return {name for name in found if name.split(".")[0] == root}


def _private_owner(module: str) -> str | None:
    """The package a private module (or private package) belongs to: ``a.b._c.d`` is
    private to ``a.b``. ``None`` for a public module."""
    parts = module.split(".")
    for depth, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:depth])
    return None


def test_modules_are_small() -> None:
    long = {
        str(p.relative_to(SRC)): n
        for p in MODULES
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}, f"modules over {MAX_LINES} lines"


def test_folders_are_small() -> None:
    crowded = {
        str(folder.relative_to(SRC)): count
        for folder in {p.parent for p in MODULES}
        if (count := len(list(folder.glob("*.py")))) > MAX_MODULES_PER_FOLDER
    }
    assert crowded == {}, f"folders with more than {MAX_MODULES_PER_FOLDER} modules"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(SRC)))
def test_private_modules_stay_inside_their_package(path: Path) -> None:
    importer = _package(path)
    leaks = sorted(
        module
        for module in _imported(path)
        if (owner := _private_owner(module)) is not None
        and not (importer == owner or importer.startswith(owner + "."))
    )
    assert leaks == []


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b.driver], ids=lambda b: b.name)
def test_a_driver_is_imported_only_inside_its_backend(backend: Any) -> None:
    """...or by the transfers' opener of the LangGraph saver that needs the same driver
    (``psycopg`` for ``PostgresSaver``): it opens LangGraph's saver, not the backend."""
    importers = sorted(_dotted(path) for path in MODULES if _imported(path, root=backend.driver))
    assert importers, f"no module imports {backend.driver}: is the registry right?"
    outside = [
        m
        for m in importers
        if not (m + ".").startswith(backend.package + ".")
        and m != f"{SAVERS_PACKAGE}.{backend.name}"
    ]
    assert outside == []


@pytest.mark.parametrize("saver", LANGGRAPH_SAVERS, ids=lambda s: s.name)
def test_langgraph_savers_are_imported_only_by_the_transfers_openers(saver: Any) -> None:
    """LangGraph's optional saver packages (and psycopg, which one of them needs) are
    imported by one module each inside ``statekeeper.transfer._savers`` (import-linter
    cannot name an external package's subpackage, so this test keeps the rule)."""
    importers = sorted(
        _dotted(path)
        for path in MODULES
        if any(
            m == saver.module or m.startswith(saver.module + ".")
            for m in _imported(path, "langgraph")
        )
    )
    assert importers == [f"{SAVERS_PACKAGE}.{saver.name}"]


def test_importing_the_transfers_imports_no_langgraph_saver() -> None:
    import subprocess
    import sys

    code = (
        "import sys, statekeeper.transfer, statekeeper.cli\n"
        "print(sorted(m for m in sys.modules if m.startswith(('langgraph.checkpoint.sqlite',"
        " 'langgraph.checkpoint.postgres', 'psycopg', 'statekeeper.transfer._savers'))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
