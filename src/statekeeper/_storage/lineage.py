"""Walks over a namespace's checkpoint lineage, shared by every backend.

A backend supplies rows — ``(checkpoint_id, channel_versions)`` along a parent chain, the
``(channel, version)`` pairs it stores values for, the writes of one checkpoint — and these
functions decide what they mean: which ancestors LangGraph's ``DeltaChannel`` needs, which
stored values no checkpoint uses any more, and how a delta channel's history is assembled.
Keeping the decisions here is what makes ``prune`` and ``get_delta_channel_history`` agree
across backends; versions are compared as whatever the backend stores them as.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from langgraph.checkpoint.base import DeltaChannelHistory, PendingWrite

__all__ = [
    "assemble_history",
    "delta_channels",
    "keep_latest_ids",
    "unused_values",
    "walk_chains",
]

V = TypeVar("V")


def delta_channels(metadata: Mapping[str, Any]) -> list[str]:
    """The ``DeltaChannel`` names LangGraph recorded in a checkpoint's metadata (its
    ``counters_since_delta_snapshot``); empty for graphs without delta channels."""
    return list(metadata.get("counters_since_delta_snapshot") or {})


def walk_chains(
    target: str,
    ancestors: Iterable[tuple[str, Mapping[str, V]]],
    channels: Sequence[str],
    holds_value: Callable[[str, V], bool],
) -> tuple[dict[str, list[str]], dict[str, V]]:
    """Follow ``ancestors`` of ``target`` (``(checkpoint_id, channel_versions)``, nearest
    first, the target itself excluded). Per channel, return the ancestors visited until
    one whose version of it ``holds_value`` (inclusive), and that version, the seed.

    ``ancestors`` is consumed lazily and no further than needed; a checkpoint seen twice
    (a re-put checkpoint can make a cycle) ends the walk instead of looping.
    """
    chains: dict[str, list[str]] = {ch: [] for ch in channels}
    seeds: dict[str, V] = {}
    remaining = set(channels)
    visited = {target}
    for ancestor, versions in ancestors:
        if ancestor in visited or not remaining:
            break
        visited.add(ancestor)
        for ch in list(remaining):
            chains[ch].append(ancestor)
            if ch in versions and holds_value(ch, versions[ch]):
                seeds[ch] = versions[ch]
                remaining.discard(ch)
    return chains, seeds


def keep_latest_ids(
    newest: str,
    metadata: Mapping[str, Any],
    chains_for: Callable[[list[str]], Mapping[str, list[str]]],
) -> set[str]:
    """The checkpoint ids ``prune(strategy="keep_latest")`` keeps in one namespace: the
    ``newest`` one, plus — when its ``metadata`` names delta channels — the ancestors
    ``chains_for(channels)`` (a :func:`walk_chains` from ``newest``) says they rebuild from."""
    keep = {newest}
    channels = delta_channels(metadata)
    if channels:
        for chain in chains_for(channels).values():
            keep.update(chain)
    return keep


def unused_values(
    stored: Iterable[tuple[str, V]],
    referenced: Iterable[Mapping[str, V]],
    bases: Mapping[tuple[str, V], V] | None = None,
) -> list[tuple[str, V]]:
    """The stored ``(channel, version)`` pairs that no checkpoint's ``channel_versions``
    in ``referenced`` uses, directly or as the base of a used append delta (``bases``
    maps a delta's ``(channel, version)`` to its base version): what a deletion may
    remove without breaking a survivor."""
    used = {(ch, version) for versions in referenced for ch, version in versions.items()}
    pending = list(used)
    while bases and pending:
        channel, version = pending.pop()
        base = bases.get((channel, version))
        if base is not None and (channel, base) not in used:
            used.add((channel, base))
            pending.append((channel, base))
    return [pair for pair in stored if pair not in used]


def assemble_history(
    channels: Sequence[str],
    chains: Mapping[str, list[str]],
    seeds: Mapping[str, Any],
    writes_of: Callable[[str, str], Iterable[PendingWrite]],
) -> dict[str, DeltaChannelHistory]:
    """Per channel: the writes of its chain's checkpoints, oldest checkpoint first, and
    its seed value when it has one. ``writes_of(checkpoint_id, channel)`` returns one
    checkpoint's decoded writes to that channel in ``writes_sort_key`` order."""
    result: dict[str, DeltaChannelHistory] = {}
    for ch in channels:
        entry: DeltaChannelHistory = {
            "writes": [w for ancestor in reversed(chains[ch]) for w in writes_of(ancestor, ch)]
        }
        if ch in seeds:
            entry["seed"] = seeds[ch]
        result[ch] = entry
    return result
