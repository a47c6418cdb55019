"""A thread's checkpoints as a tree: forks are branches, the head is marked.

Every checkpoint names its parent (``parent_config``), so a thread's history is a tree:
a fork (``Runner.fork``, LangGraph's ``update_state`` on an old checkpoint) writes a
second child of an older checkpoint. The tree is laid out as *branches*: a branch is a
run of checkpoints, each the parent of the next; at a checkpoint with several children,
the branch goes on through the child on the way to the head (else the newest), and
each other child starts a branch of its own, listed under that checkpoint. So a thread
without forks is one flat branch, however long, and nesting only grows with forks.

Subgraphs write checkpoints under their own namespace (``checkpoint_ns``); each
namespace is its own tree, the root graph's (``""``) first.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from langgraph.checkpoint.base import CheckpointTuple

from statekeeper.threads import pending_nodes

__all__ = ["Namespace", "Node", "build_tree"]


@dataclass
class Node:
    """One checkpoint in the tree. ``ran`` are the nodes that ran to make it (those its
    parent had next), empty for an input, a fork or an update; ``branches`` the forks
    that start at it, each a list of nodes."""

    checkpoint_id: str
    parent_id: str | None
    step: Any
    source: Any
    ts: str
    ran: tuple[str, ...]
    next: tuple[str, ...]
    writes: int  # pending writes stored at this checkpoint
    interrupted: bool  # an interrupt() is among them
    failed: bool  # ...or an error
    head: bool = False
    branches: list[list[Node]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "checkpoint_id": self.checkpoint_id,
            "parent_id": self.parent_id,
            "step": self.step,
            "source": self.source,
            "ts": self.ts,
            "ran": list(self.ran),
            "next": list(self.next),
            "writes": self.writes,
            "interrupted": self.interrupted,
            "failed": self.failed,
            "head": self.head,
            "branches": [[node.to_json() for node in branch] for branch in self.branches],
        }


@dataclass
class Namespace:
    """The tree of one checkpoint namespace: its branches from the oldest root."""

    ns: str
    count: int
    head: str
    branches: list[list[Node]]

    def to_json(self) -> dict[str, Any]:
        return {
            "checkpoint_ns": self.ns,
            "count": self.count,
            "head": self.head,
            "branches": [[node.to_json() for node in branch] for branch in self.branches],
        }


def _parent_id(tup: CheckpointTuple) -> str | None:
    parent = tup.parent_config
    if parent is None:
        return None
    found = parent.get("configurable", {}).get("checkpoint_id")
    return found if isinstance(found, str) else None


def _node(tup: CheckpointTuple, parent: CheckpointTuple | None) -> Node:
    metadata = tup.metadata or {}
    source = metadata.get("source")
    channels = [channel for _, channel, _ in tup.pending_writes or ()]
    return Node(
        checkpoint_id=tup.checkpoint["id"],
        parent_id=_parent_id(tup),
        step=metadata.get("step"),
        source=source,
        ts=tup.checkpoint["ts"],
        # a loop step ran what its parent had next; an input, fork or update ran nothing
        ran=pending_nodes(parent.checkpoint) if parent is not None and source == "loop" else (),
        next=pending_nodes(tup.checkpoint),
        writes=len(channels),
        interrupted="__interrupt__" in channels,
        failed="__error__" in channels,
    )


def build_tree(tuples: Iterable[CheckpointTuple]) -> list[Namespace]:
    """The trees of a thread's checkpoints (any order, any namespaces), the root
    namespace first, then the others by name. The head of a namespace is its newest
    checkpoint (the one ``get_tuple`` returns)."""
    by_ns: dict[str, dict[str, CheckpointTuple]] = defaultdict(dict)
    for tup in tuples:
        by_ns[tup.config["configurable"].get("checkpoint_ns", "")][tup.checkpoint["id"]] = tup
    return [_namespace(ns, by_ns[ns]) for ns in sorted(by_ns)]


def _namespace(ns: str, tuples: dict[str, CheckpointTuple]) -> Namespace:
    nodes: dict[str, Node] = {}
    for checkpoint_id, tup in tuples.items():
        parent_id = _parent_id(tup)
        nodes[checkpoint_id] = _node(tup, tuples.get(parent_id) if parent_id else None)
    head = max(nodes)
    nodes[head].head = True
    children: dict[str, list[str]] = defaultdict(list)
    roots = []
    for checkpoint_id, node in sorted(nodes.items()):
        if node.parent_id in nodes:
            children[node.parent_id].append(checkpoint_id)
        else:  # the first checkpoint, or one whose parent was pruned
            roots.append(checkpoint_id)
    to_head = set()
    walk: str | None = head
    while walk is not None and walk not in to_head:
        to_head.add(walk)
        walk = nodes[walk].parent_id if nodes[walk].parent_id in nodes else None
    return Namespace(
        ns=ns,
        count=len(nodes),
        head=head,
        branches=[_branch(root, nodes, children, to_head) for root in roots],
    )


def _branch(
    start: str, nodes: dict[str, Node], children: dict[str, list[str]], to_head: set[str]
) -> list[Node]:
    branch = []
    current: str | None = start
    while current is not None:
        node = nodes[current]
        branch.append(node)
        kids = children.get(current, [])
        if not kids:
            break
        on_path = [kid for kid in kids if kid in to_head]
        main = on_path[0] if on_path else kids[-1]  # kids are sorted: the last is newest
        node.branches = [_branch(kid, nodes, children, to_head) for kid in kids if kid != main]
        current = main
    return branch
