"""Leaf-grounded evidence recall under a token budget, session recall and MRR; pure functions, no store.

A retrieval answer is a ranked list of `Item`s of any level. It is read in rank order and cut at a token
budget: an item that would take the running total past the budget ends the list (later, smaller items are not
taken). Only L1 chunks ground evidence: an evidence turn counts as found when its dia_id is among the
`message_ids` of a kept L1 chunk; summaries cost their tokens but cover nothing.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Item:
    """One returned memory: its level, its size in tokens (cl100k_base) and the message ids it covers."""

    level: int
    tokens: int
    message_ids: tuple[str, ...]


@dataclass(frozen=True)
class Scores:
    """One question's scores: turn recall and session recall per budget (fractions in [0, 1]), and RR."""

    recall: dict[int, float]
    session_recall: dict[int, float]
    reciprocal_rank: float


def cut(items: Sequence[Item], budget: int) -> list[Item]:
    """The prefix of `items` whose tokens add up to at most `budget`; the first item that does not fit ends it."""
    kept, used = [], 0
    for it in items:
        if used + it.tokens > budget:
            break
        kept.append(it)
        used += it.tokens
    return kept


def covered(items: Iterable[Item]) -> set[str]:
    """Message ids grounded by the L1 items."""
    return {m for it in items if it.level == 1 for m in it.message_ids}


def session_of(dia_id: str) -> str:
    """'D3:14' -> 'D3'."""
    return dia_id.split(":")[0]


def reciprocal_rank(items: Sequence[Item], evidence: Iterable[str]) -> float:
    """1 / rank of the first L1 item holding any evidence id (rank counts every item, summaries too); else 0."""
    ev = set(evidence)
    for rank, it in enumerate(items, 1):
        if it.level == 1 and ev.intersection(it.message_ids):
            return 1.0 / rank
    return 0.0


def score(items: Sequence[Item], evidence: Sequence[str], budgets: Sequence[int]) -> Scores:
    """Scores of one answer. `evidence`: normalised dia_ids (non-empty). RR is read within the largest budget."""
    ev = set(evidence)
    sessions = {session_of(e) for e in ev}
    recall, session_recall = {}, {}
    for b in budgets:
        got = covered(cut(items, b))
        recall[b] = len(ev & got) / len(ev)
        session_recall[b] = len(sessions & {session_of(m) for m in got}) / len(sessions)
    return Scores(recall, session_recall, reciprocal_rank(cut(items, max(budgets)), ev))


@dataclass
class Summary:
    """Mean scores of a group of questions."""

    n: int
    recall: dict[int, float]
    session_recall: dict[int, float]
    mrr: float


def summarise(scores: Sequence[Scores]) -> Summary:
    """Means over `scores` (all computed with the same budgets); zeros for an empty group."""
    if not scores:
        return Summary(0, {}, {}, 0.0)
    budgets = list(scores[0].recall)
    n = len(scores)
    return Summary(
        n,
        {b: sum(s.recall[b] for s in scores) / n for b in budgets},
        {b: sum(s.session_recall[b] for s in scores) / n for b in budgets},
        sum(s.reciprocal_rank for s in scores) / n,
    )


def by_category(scores: Sequence[Scores], categories: Sequence[int]) -> dict[str, Summary]:
    """{'all': ..., '1': ..., '2': ...}: summaries overall and per category (parallel sequences)."""
    groups: dict[str, list[Scores]] = defaultdict(list)
    for s, c in zip(scores, categories, strict=True):
        groups["all"].append(s)
        groups[str(c)].append(s)
    return {k: summarise(v) for k, v in sorted(groups.items(), key=lambda kv: (kv[0] != "all", kv[0]))}
