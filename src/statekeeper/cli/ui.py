"""``statekeeper ui``: the local web inspector (docs/ui.md), with its arguments next to
its handler.

It opens the storage read-only unless ``--write``, binds 127.0.0.1 by default, prints a
URL with a one-time token and serves until Ctrl-C. The web stack is the optional extra
``statekeeper[ui]``, imported only when the command runs.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import webbrowser
from typing import Any

from statekeeper.cli._common import EXIT, Commands, open_saver, read_only_options
from statekeeper.urls import redact

__all__ = ["add_ui"]

_EXTRA = ("starlette", "jinja2", "uvicorn", "markupsafe")


def add_ui(commands: Commands) -> None:
    sub = commands.add(
        "ui",
        cmd_ui,
        "browse threads, checkpoints, interrupts, graphs and memory in a browser",
        examples=(
            "statekeeper ui                            # read-only, opens a browser",
            "statekeeper ui --write --port 8800 --no-browser --graph myapp.agents:graph",
        ),
    )
    sub.add_argument(
        "--store", metavar="URL", help="memory store (env STATEKEEPER_STORE; default: the --db URL)"
    )
    sub.add_argument(
        "--graph", metavar="REF", help="graph to draw and run (default: the one a thread names)"
    )
    sub.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    sub.add_argument(
        "--port", type=int, default=8765, metavar="N", help="port (default 8765; 0: any free one)"
    )
    sub.add_argument(
        "--write", action="store_true", help="allow resuming and forking (default: read-only)"
    )
    sub.add_argument("--no-browser", action="store_true", help="print the URL, open no browser")


def cmd_ui(args: argparse.Namespace) -> int:
    """Serve the inspector over ``--db`` until Ctrl-C (then exit 0); exit 2 when the
    ``ui`` extra is not installed, ``--graph`` cannot be loaded or the address cannot be
    bound."""
    try:
        from statekeeper.ui import UIOptions, create_app, new_token
        from statekeeper.ui.security import allowed_hosts_for
        from statekeeper.ui.server import bind, serve, start_url
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in _EXTRA:
            raise
        print("statekeeper ui: needs pip install 'statekeeper[ui]'", file=sys.stderr)
        return EXIT["usage"]
    if args.graph is not None:
        # imported now: a bad reference fails here, and the stored values of the types
        # its module defines are decoded as those types (the serde rebuilds only types
        # of modules already imported)
        from statekeeper.graphs import load_graph

        load_graph(args.graph)
    try:
        sock = bind(args.host, args.port)
    except OSError as exc:
        print(f"statekeeper ui: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return EXIT["usage"]
    opened: list[Any] = []
    with sock, open_saver(args.db, read_only=not args.write) as saver:
        token = new_token()
        store_url = args.store or os.environ.get("STATEKEEPER_STORE") or args.db
        options = UIOptions(
            saver=saver,
            token=token,
            store=lambda: _remember(opened, _open_store(store_url, write=args.write)),
            graph_ref=args.graph,
            write=args.write,
            allowed_hosts=allowed_hosts_for(args.host, _own_names(args.host)),
            port=sock.getsockname()[1],
            label=redact(args.db) + ("" if args.write else " (read-only)"),
        )
        url = start_url(sock, token)
        _announce(args, url)
        if not args.no_browser:
            webbrowser.open(url)
        try:
            serve(create_app(options), sock)
        except KeyboardInterrupt:
            pass  # Ctrl-C is how the inspector is meant to stop
        finally:
            for store in opened:
                store.close()
    return EXIT["ok"]


def _announce(args: argparse.Namespace, url: str) -> None:
    mode = "resume and fork allowed (--write)" if args.write else "read-only"
    print(f"statekeeper ui: {url}", flush=True)
    print(
        f"  {redact(args.db)}, {mode}; the link signs one browser in, once. Ctrl-C stops.",
        file=sys.stderr,
    )
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(
            f"  listening on {args.host}: other machines can reach this port; only the "
            "token keeps them out",
            file=sys.stderr,
        )


def _own_names(host: str) -> tuple[str, ...]:
    """Names this machine answers to when the inspector listens beyond loopback."""
    if host in ("127.0.0.1", "localhost", "::1"):
        return ()
    return (socket.gethostname(), socket.getfqdn())


def _remember(opened: list[Any], store: Any) -> Any:
    opened.append(store)
    return store


def _open_store(url: str, *, write: bool) -> Any:
    """The memory store at ``url``: read-only unless ``--write``, like the storage."""
    from statekeeper.memory.store import known_store_schemes, open_store

    return open_store(url, **({} if write else read_only_options(url, known_store_schemes())))
