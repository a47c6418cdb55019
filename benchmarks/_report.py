"""What every benchmark here prints: a progress line on stderr, tables in markdown, and
the ratio of every other row to each of LangGraph's savers (< 1: faster or smaller).

A row is a dict with ``saver`` (its label), ``langgraph`` (is it one of LangGraph's own
savers, which the ratios are taken against), ``error`` (``None``, or why the row did not
run) and one number, or ``None``, per column; rows with a ``group`` (e.g. a variant of
the workload) are compared only with LangGraph's rows of the same group.
"""

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

T = TypeVar("T")
Row = dict[str, Any]


def add_row_options(
    parser: argparse.ArgumentParser, keys: Sequence[str], default: Sequence[str] | None = None
) -> None:
    """``--savers`` (which rows to run, from ``keys``; ``default``: all) and ``--json``."""
    chosen = ",".join(keys if default is None else default)
    parser.add_argument(
        "--savers",
        default=chosen,
        help=f"comma-separated rows to run, from {','.join(keys)} (default: {chosen})",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of markdown")


def chosen_rows(
    parser: argparse.ArgumentParser, args: argparse.Namespace, keys: Sequence[str]
) -> list[str]:
    """The ``--savers`` asked for; an unknown one is a usage error naming the known ones."""
    wanted = [k.strip() for k in args.savers.split(",") if k.strip()]
    if unknown := sorted(set(wanted) - set(keys)):
        parser.error(f"unknown saver(s) {', '.join(unknown)}; choose from {', '.join(keys)}")
    return wanted


def timed_ms(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def rotated(items: Sequence[T], shift: int) -> list[T]:
    """``items`` starting at a different one each time, so none always follows another."""
    if not items:
        return []
    shift %= len(items)
    return [*items[shift:], *items[:shift]]


def percentile(samples: Sequence[float], pct: float) -> float:
    """The ``pct``-th percentile (0-100) of ``samples``, linearly interpolated."""
    if len(samples) == 1:
        return samples[0]
    return statistics.quantiles(samples, n=100, method="inclusive")[round(pct) - 1]


class Progress:
    """A progress bar on stderr: one line rewritten in place on a terminal; otherwise (a
    log, a pipe) a line every 10%, so nothing floods. Never on stdout."""

    def __init__(self, total: int, what: str) -> None:
        self.total, self.what = max(total, 1), what
        self.done = 0
        self.start = time.monotonic()
        self.tty = sys.stderr.isatty()
        self.shown = -1  # the last tenth printed, off a terminal

    def advance(self, n: int = 1, note: str = "") -> None:
        self.done = min(self.done + n, self.total)
        fraction = self.done / self.total
        if not self.tty and int(fraction * 10) == self.shown:
            return
        self.shown = int(fraction * 10)
        elapsed = time.monotonic() - self.start
        eta = elapsed / fraction - elapsed if fraction else 0.0
        bar = "#" * int(fraction * 24)
        line = (
            f"[{bar:<24}] {fraction:4.0%} {self.done}/{self.total} {self.what}"
            f" {note} {elapsed:.0f}s, ~{eta:.0f}s left"
        )
        if self.tty:
            print(f"\r{line:<100}", end="", file=sys.stderr, flush=True)
        else:
            print(line, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.tty:
            print(file=sys.stderr, flush=True)


def ratios(rows: Iterable[Row], columns: Iterable[str]) -> dict[str, dict[str, float | None]]:
    """``"ours / theirs"`` -> column -> ratio, for every row that ran against every one of
    LangGraph's rows of its group that ran (``None`` where either value is missing or
    zero)."""
    ok = [row for row in rows if row.get("error") is None]
    columns = list(columns)
    out: dict[str, dict[str, float | None]] = {}
    for mine in ok:
        if mine["langgraph"]:
            continue
        for theirs in ok:
            if not theirs["langgraph"] or theirs.get("group") != mine.get("group"):
                continue
            out[f"{mine['saver']} / {theirs['saver']}"] = {
                column: (
                    mine[column] / theirs[column]
                    if mine.get(column) is not None and theirs.get(column)
                    else None
                )
                for column in columns
            }
    return out


def fmt(value: float | None, column: str = "") -> str:
    if value is None:
        return "-"
    if "bytes" in column or isinstance(value, int):
        return f"{value:,.0f}"
    return f"{value:.2f}" if value < 100 else f"{value:,.0f}"


def table(rows: Iterable[Row], columns: Mapping[str, str], first: str = "saver") -> list[str]:
    """A markdown table: one line per row, ``columns`` maps a row key to its header. A row
    that did not run says why."""
    lines = [
        f"| {first} | " + " | ".join(columns.values()) + " |",
        "|---|" + "---:|" * len(columns),
    ]
    for row in rows:
        if row.get("error"):
            lines.append(
                f"| {row['saver']} | not run: {row['error']} |" + " |" * (len(columns) - 1)
            )
        else:
            cells = [fmt(row.get(column), column) for column in columns]
            lines.append(f"| {row['saver']} | " + " | ".join(cells) + " |")
    return lines


LOWER_IS_BETTER = "Ratios to LangGraph's savers (< 1: faster / smaller than LangGraph's):"


def ratio_table(
    rows: Iterable[Row], columns: Mapping[str, str], caption: str = LOWER_IS_BETTER
) -> list[str]:
    """The ratios of :func:`ratios` as a markdown table (nothing when no pair ran)."""
    found = ratios(rows, columns)
    if not found:
        return []
    lines = ["", caption, ""]
    lines += [
        "| ratio | " + " | ".join(columns.values()) + " |",
        "|---|" + "---:|" * len(columns),
    ]
    for name, row in found.items():
        # a third decimal under 0.1, where the bytes ratios are (0.018 is not 0.02)
        cells = ["-" if v is None else f"{v:.3f}" if v < 0.1 else f"{v:.2f}" for v in row.values()]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def as_json(payload: Mapping[str, Any], rows: list[Row], columns: Iterable[str]) -> str:
    """``payload`` (the run's parameters) with its ``results`` and their ``ratios``."""
    return json.dumps(
        {**payload, "results": rows, "ratios": ratios(rows, columns)}, indent=2, default=str
    )
