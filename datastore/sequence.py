"""Reading a source in order: the chunks before and after a node (its neighbours in the conversation)."""

from __future__ import annotations

from pyramind.datastore.hooks import StoreBase
from pyramind.models.memory import MemoryNode


class Sequence(StoreBase):
    """neighbours: a node's adjacent nodes of the same level and source, by position."""

    def neighbours(self, ns: str, node: MemoryNode, k: int) -> tuple[list[MemoryNode], list[MemoryNode]]:
        """The up to `k` nodes before and the up to `k` after `node` among its source's nodes of the same level
        (for an L1 chunk: the chunks around it in the conversation), each list in position order; the node
        itself is in neither. `k` <= 0 gives ([], []). One indexed read (`_nodes_at`); namespace-scoped."""
        if k <= 0:
            return [], []
        around = self._nodes_at(ns, node.source_id, node.level, max(0, node.position - k), node.position + k)
        before = [n for n in around if n.position < node.position]
        after = [n for n in around if n.position > node.position]
        return before, after
