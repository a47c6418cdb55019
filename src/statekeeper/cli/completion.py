"""``statekeeper completion SHELL``: the shell completion script, for bash, zsh or fish.

The script is generated from the parser itself by shtab, so it always knows every
command, subcommand and option of this version, and completing a word never starts
Python: the shell reads the script once. How to install it is in docs/cli.md.
"""

from __future__ import annotations

import argparse

from statekeeper import _console
from statekeeper.cli._common import EXIT, Commands

__all__ = ["SHELLS", "add_completion", "completion_script"]

SHELLS = ("bash", "zsh", "fish")


def add_completion(commands: Commands) -> None:
    sub = commands.add(
        "completion",
        cmd_completion,
        "print the shell completion script for bash, zsh or fish",
        examples=(
            "statekeeper completion bash > ~/.local/share/bash-completion/completions/statekeeper",
            "statekeeper completion zsh > ~/.zfunc/_statekeeper   # with fpath+=(~/.zfunc)",
            "statekeeper completion fish > ~/.config/fish/completions/statekeeper.fish",
        ),
    )
    sub.add_argument("shell", choices=SHELLS, help="the shell to complete in")


def cmd_completion(args: argparse.Namespace) -> int:
    """Print the completion script for ``args.shell`` on stdout (with ``--json``, as
    ``{"shell", "script"}``, like every command's output)."""
    script = completion_script(args.shell)
    if args.json:
        print(_console.dumps({"shell": args.shell, "script": script}))
    else:
        print(script, end="")
    return EXIT["ok"]


def completion_script(shell: str) -> str:
    """The completion script for ``shell`` (one of :data:`SHELLS`), from the whole parser."""
    import shtab

    from statekeeper.cli import build_parser

    script = shtab.complete(build_parser(), shell=shell)
    return script if script.endswith("\n") else script + "\n"
