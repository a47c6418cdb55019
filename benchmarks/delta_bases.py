"""What skip-delta bases cost and buy: the chat workload with rows that build each append
delta on the version just before it instead, a layout statekeeper does not write.

statekeeper stores a list that grew by appending as a delta on an earlier version, chosen
as Subversion's skip-deltas choose (``statekeeper._storage.remembered``): a read applies
at most 16 deltas, and each message is stored about 0.75·log4(k) times after k versions.
Building every delta on the version before it would store each message once, but a read
of a version far from its full copy applies as many deltas as versions came between.

This is ``chat_workload.py`` (same graph, inputs, columns and interleaving) with a
``-linear`` row beside each of statekeeper's SQLite, file and PostgreSQL rows: the same
checkpointer, whose puts choose their delta base with a skip radix larger than any
version count (so every delta is on the previous version). For the whole run the
readers' chain limit is lifted, so that they follow chains of any length; the shipped
rows never make a chain of more than 16 deltas at these sizes, so they behave as
shipped. The Redis reader fetches a bounded chain in one script, so it has no row here.
Nothing is asserted: it is a benchmark.

    .venv/bin/python benchmarks/delta_bases.py                       # 3 threads x 200 turns
    .venv/bin/python benchmarks/delta_bases.py --turns 50 --savers memory,ours,ours-linear
"""

import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import chat_workload
from _savers import BACKENDS, Backend, Store

from statekeeper._storage import remembered
from statekeeper.backends.file import _values as file_values
from statekeeper.backends.file import _verify as file_verify
from statekeeper.backends.postgres import _reads as postgres_reads
from statekeeper.backends.sqlite import _values as sqlite_values

LINEAR = 1 << 62  # a skip radix no version count reaches: every base is the previous version
ROWS = ("ours", "file", "pg")  # statekeeper's rows that get a -linear twin
_LIMITED = (remembered, file_values, file_verify, postgres_reads, sqlite_values)

Opener = Callable[[Path], AbstractContextManager[Store]]


def with_radix(opener: Opener, radix: int) -> Opener:
    """``opener``, whose saver's puts choose delta bases with ``radix``. Rows never run at
    the same time (turns are played one row after another, and a sync ``invoke`` returns
    once its puts are stored), so setting the module's radix at each put is enough."""

    @contextmanager
    def open_with_radix(path: Path) -> Iterator[Store]:
        with opener(path) as store:
            saver: Any = store.saver
            put = saver.put

            def put_with_radix(*args: Any, **kwargs: Any) -> Any:
                remembered.SKIP_RADIX = radix
                return put(*args, **kwargs)

            saver.put = put_with_radix
            yield store

    return open_with_radix


def main(argv: list[str]) -> int:
    shipped = remembered.SKIP_RADIX
    for row in [b for b in BACKENDS if b.key in ROWS]:
        at = BACKENDS.index(row)
        linear = f"{row.label}, linear deltas"
        BACKENDS[at : at + 1] = [
            Backend(row.key, row.label, with_radix(row.open, shipped)),
            Backend(f"{row.key}-linear", linear, with_radix(row.open, LINEAR)),
        ]
    if not any(word.startswith("--savers") for word in argv):
        argv = [*argv, "--savers", ",".join(["memory", *(f"{r},{r}-linear" for r in ROWS)])]
    for module in _LIMITED:
        module.MAX_CHAIN = 1 << 30  # chains of any length are read back
    return chat_workload.main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
