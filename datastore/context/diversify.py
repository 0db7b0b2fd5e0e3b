"""Diversification: the block's candidates reordered so that one session does not take every place (`diversified`)."""

from __future__ import annotations

from datastore.context.policy import DEFAULT_POLICY, BlockPolicy
from datastore.storage import Hits
from models.memory import MemoryNode


def diversified(hits: Hits, policy: BlockPolicy = DEFAULT_POLICY) -> Hits:
    """The hits reordered so that one session does not take every place when several match: past policy.session_free
    hits of a session, each further one has its score multiplied by policy.session_decay per hit of that session already
    placed, so a hit of another session (or conversation) comes first. Greedy, stable; neighbouring chunks of one
    session are left together up to the cap (they often hold a question and its answer)."""
    placed: dict[str, int] = {}
    pool = list(hits)
    out: Hits = []

    def session(n: MemoryNode) -> str:
        return f"{n.source_id}/{n.session_ids[0] if n.session_ids else ''}"

    while pool:

        def adjusted(h: tuple[MemoryNode, float]) -> float:
            return h[1] * policy.session_decay ** max(0, placed.get(session(h[0]), 0) - policy.session_free + 1)

        best = max(pool, key=adjusted)
        pool.remove(best)
        placed[session(best[0])] = placed.get(session(best[0]), 0) + 1
        out.append(best)
    return out
