"""Reading the tree by id: one node, or a node and everything below it. Functions over any Storage."""

from __future__ import annotations

from datastore.storage import Storage
from models.memory import MemoryNode
from services.errors import NotFoundError


def get_node(storage: Storage, ns: str, node_id: str) -> MemoryNode:
    """The node with this id in the namespace; raises NotFoundError naming `id` (also for another namespace's)."""
    found = storage.get_nodes(ns, [node_id])
    if not found:
        raise NotFoundError(f"no memory with id {node_id!r}", "id")
    return found[0]


def subtree(storage: Storage, ns: str, node_id: str) -> list[MemoryNode]:
    """The node and every node below it, breadth first (each level in position order); raises NotFoundError."""
    out = [get_node(storage, ns, node_id)]
    frontier = out
    while frontier:
        child_ids = [c for n in frontier for c in n.children]
        frontier = storage.get_nodes(ns, child_ids) if child_ids else []
        frontier.sort(key=lambda n: (n.level, n.position))
        out.extend(frontier)
    return out
