"""``statekeeper graph``: draw a graph offline, as SVG, Mermaid text or plain text.

Nothing is fetched: the drawing is made by :mod:`statekeeper.graphs.drawing` in this
process (LangGraph's own ``draw_mermaid_png`` calls a web service).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from statekeeper import _console
from statekeeper.cli._common import CommandError, Commands, flush_stdout, stdout_errors

__all__ = ["add_graph", "cmd_graph"]

FORMATS = ("svg", "mermaid", "ascii")
# the format an output file's suffix asks for, when --format does not say
_SUFFIXES = {".svg": "svg", ".mmd": "mermaid", ".mermaid": "mermaid", ".txt": "ascii"}


def add_graph(commands: Commands) -> None:
    sub = commands.add(
        "graph",
        cmd_graph,
        "draw a graph offline: SVG, Mermaid or text",
        examples=(
            "statekeeper graph examples.approval_agent:graph             # text, on a terminal",
            "statekeeper graph examples.approval_agent:graph -o agent.svg",
            "statekeeper graph myapp.agents:graph --format mermaid --xray 1 > agent.mmd",
        ),
    )
    sub.add_argument("graph", metavar="REF", help="the graph, as package.module:attr")
    sub.add_argument(
        "--format",
        choices=FORMATS,
        help="default: from the -o suffix (.svg, .mmd, .txt), else ascii on a terminal and "
        "svg otherwise",
    )
    sub.add_argument(
        "--xray",
        type=_depth,
        default=0,
        metavar="N",
        help="draw the nodes inside subgraphs, N levels deep (default 0: none)",
    )
    sub.add_argument("-o", "--output", default="-", metavar="FILE", help="default: stdout")


def cmd_graph(args: argparse.Namespace) -> int:
    """Load ``REF``, draw it, and write the drawing to ``--output`` (whole or not at all:
    a file is written next to its target, then renamed over it). With ``--json``, the
    graph's layers, nodes and edges as JSON instead of a drawing."""
    from statekeeper.graphs import drawing, load_graph

    if args.json and args.format:
        raise CommandError("--json and --format cannot be combined: --json prints the graph data")
    graph = load_graph(args.graph)
    try:
        drawable = graph.get_graph(xray=args.xray)
    except Exception as exc:  # the graph's own code: reported as one line
        raise CommandError(
            f"cannot draw graph {args.graph!r}: get_graph raised {type(exc).__name__}: {exc}"
        ) from exc
    if args.json:
        text = _console.dumps(drawing.describe(drawable)) + "\n"
    else:
        render = {
            "svg": drawing.render_svg,
            "mermaid": drawing.render_mermaid,
            "ascii": drawing.render_ascii,
        }[_format(args)]
        text = render(drawable)
    _write(args.output, text)
    return 0


def _depth(value: str) -> int:
    try:
        depth = int(value)
    except ValueError:
        depth = -1
    if depth < 0:
        raise argparse.ArgumentTypeError(f"expected a depth (0, 1, 2...), got {value!r}")
    return depth


def _format(args: argparse.Namespace) -> str:
    if args.format:
        return str(args.format)
    if args.output != "-":
        return _SUFFIXES.get(Path(args.output).suffix.lower(), "svg")
    return "ascii" if sys.stdout.isatty() else "svg"


def _write(output: str, text: str) -> None:
    if output == "-":
        with stdout_errors():
            sys.stdout.write(text)
        flush_stdout()
        return
    if not output:
        raise CommandError("-o/--output '': no file named; give a path, or - for stdout")
    target = Path(output)
    try:
        fd, temporary = tempfile.mkstemp(
            dir=target.parent, prefix=f".{target.name}.", suffix=".tmp"
        )
        try:
            Path(temporary).chmod(0o666 & ~_umask())  # an ordinary new file, not 0600
            with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as out:
                out.write(text)
            Path(temporary).replace(target)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise CommandError(f"cannot write {output!r}: {exc.strerror or exc}") from None


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
