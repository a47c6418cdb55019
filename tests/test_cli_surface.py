"""The surface of the ``statekeeper`` command: which commands exist, in which order
``--help`` lists them, and which arguments each takes. A change here is a change to what
users type and scripts call, so it must show up as a deliberate diff of this file (and of
docs/cli.md)."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

from statekeeper.cli import EXIT, build_parser

# every command and every memory command, in --help order: its positional arguments in
# order, then its options sorted; the global options are everywhere (checked below)
SURFACE = {
    "run": "graph --input --thread",
    "resume": "thread --answer --from --graph",
    "threads": "--after --limit --status",
    "history": "thread --limit --ns",
    "show": "thread CHECKPOINT --checkpoint --ns",
    "diff": "thread FROM TO --ns",
    "fork": "thread CHECKPOINT --answer --to",
    "copy": "SRC_URL DST_URL --skip-refused --thread",
    "export": "--skip-refused --thread -o/--output",
    "import": "FILE",
    "prune": "THREAD --all --dry-run --strategy -y/--yes",
    "verify": "--quarantine --repair",
    "migrate": "THREAD --all --graph",
    "memory": "COMMAND",
    "memory search": (
        "query --as-of --include-expired --k --max-age --min-score --namespace --store --thread"
    ),
    "memory show": "key --namespace --store --thread",
    "memory stats": "--since --store --thread --until --window",
    "memory export": "--namespace --store --thread -o/--output",
    "memory eval": (
        "DATASET.json --answers --budget --chart --k --min-score --no-hops --no-sweep "
        "--no-windows --reader --reader-budget --store"
    ),
    "graph": "REF --format --xray -o/--output",
    "demo": "--graph --redis --workdir",
    "ui": "--graph --host --no-browser --port --store --write",
    "completion": "shell",
}

EVERYWHERE = {"-h/--help", "--db", "--json", "-v/--verbose", "-q/--quiet"}

DOCS = Path(__file__).resolve().parent.parent / "docs" / "cli.md"


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return {
        name: sub
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
        for name, sub in action.choices.items()
    }


def _commands(
    parser: argparse.ArgumentParser, prefix: str = ""
) -> dict[str, argparse.ArgumentParser]:
    found: dict[str, argparse.ArgumentParser] = {}
    for name, sub in _subcommands(parser).items():
        found[prefix + name] = sub
        found.update(_commands(sub, f"{prefix}{name} "))
    return found


def _arguments(parser: argparse.ArgumentParser) -> tuple[list[str], set[str]]:
    positionals = [
        str(action.metavar or action.dest)
        for action in parser._actions
        if not action.option_strings
    ]
    options = {
        "/".join(action.option_strings) for action in parser._actions if action.option_strings
    }
    return positionals, options


def test_the_commands_and_their_arguments_are_the_pinned_ones() -> None:
    commands = _commands(build_parser())
    assert list(commands) == list(SURFACE)
    for name, sub in commands.items():
        positionals, options = _arguments(sub)
        assert options >= EVERYWHERE, name
        shown = " ".join([*positionals, *sorted(options - EVERYWHERE)])
        assert shown == SURFACE[name], name


def test_the_top_level_takes_only_the_global_options() -> None:
    positionals, options = _arguments(build_parser())
    assert (positionals, options) == (["COMMAND"], {*EVERYWHERE, "--version"})


def _docs_table(row: str) -> list[str]:
    """The first cells of the rows of a table in docs/cli.md, as matched by ``row``."""
    return re.findall(row, DOCS.read_text(encoding="utf-8"), re.MULTILINE)


def test_docs_list_every_command_with_its_arguments() -> None:
    synopses = _docs_table(r"^\| `([^`]+)` \|")
    commands = [name for name in SURFACE if name != "memory"]  # the group is its commands
    assert len(synopses) == len(commands)
    for name in commands:
        (synopsis,) = [s for s in synopses if f"{s} ".startswith(f"{name} ")]
        for argument in SURFACE[name].split():
            if name.startswith("memory ") and name != "memory eval" and argument == "--store":
                continue  # the --store the memory commands read is described once, above
            spellings = argument.split("/") if argument.startswith("-") else [argument]
            assert any(
                re.search(rf"(?<![\w-]){re.escape(s)}(?![\w-])", synopsis, re.IGNORECASE)
                for s in spellings
            ), f"docs/cli.md: `{name}` does not show {argument}"


def test_docs_list_every_exit_code() -> None:
    documented = {int(code) for code in _docs_table(r"^\| +(\d+) \|")}
    assert documented == {*EXIT.values(), 130}  # 130: stopped by Ctrl-C


def test_help_imports_no_command_dependencies() -> None:
    """``statekeeper --help`` stays fast: building the parser imports what the commands
    run (graphs, transfer, memory) only when a command runs."""
    code = (
        "import sys\n"
        "from statekeeper.cli import build_parser\n"
        "build_parser().format_help()\n"
        "heavy = ('statekeeper.graphs', 'statekeeper.transfer', 'statekeeper.memory',\n"
        "         'statekeeper.ui', 'starlette', 'jinja2', 'uvicorn')\n"
        "print(sorted(name for name in sys.modules if name.startswith(heavy)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
