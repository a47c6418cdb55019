"""Every Python code block in README.md and docs/*.md runs, in order, as a reader would
run them: the blocks of one page share one namespace, in a fresh current directory.

pytest-examples finds the blocks; each is compiled under its page's name with its own line
numbers, so a failure points at the line of the page that broke."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest
from pytest_examples import CodeExample, find_examples

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _python_blocks(page: Path) -> list[CodeExample]:
    return [block for block in find_examples(page) if block.prefix in ("py", "python")]


def _run(block: CodeExample, namespace: dict[str, Any]) -> None:
    # blank lines before the source keep the page's line numbers in tracebacks
    source = "\n" * block.start_line + block.source
    exec(compile(source, str(block.path), "exec"), namespace)


@pytest.mark.parametrize(
    "page", [p for p in PAGES if _python_blocks(p)], ids=lambda p: p.relative_to(ROOT).name
)
def test_code_blocks_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(ROOT))  # blocks may import the examples/ package
    # a real module: typing and pydantic resolve a page's annotations through sys.modules
    module = types.ModuleType(f"docs_{page.stem.replace('-', '_')}")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    for block in _python_blocks(page):
        _run(block, module.__dict__)
