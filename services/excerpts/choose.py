"""Choosing an excerpt: the stored sentences of a memory closest to a query that fit a token budget.

**Excerpt** (`excerpt`). A memory's sentences (services/chunking.SpanSentence: a chunk's, a summary's picks, each
with its id, speaker and time) are ranked by the caller's closeness scores, ties going to sentences nearer the
best ones and then to earlier ones. The best are kept whole, in their order, while the rendered excerpt fits
`budget_tokens` (cl100k, counted on the rendered text); a whole line of a message's body close to nothing (when
some sentence is close) fills the room only with MIN_FILL_WORDS words or more (a list number, a heading or a name
alone says nothing). Sentences already shown elsewhere in the block (their ids in `seen`) are left out, and
`groups` are kept or left out together (a short turn, whole or not at all). Memories that fit come back whole.

**Rendering** is the one renderer of sentences (services/chunking.sentence_runs / render_runs, without stamps:
the block writes dates on lines of their own): `speaker: sentences`, neighbours joined as the message has them,
one ELISION (`…`, one cl100k token) where text was left out.

**Speed.** Each trial renders the kept sentences and counts the rendered text line by line with cached counts
(exactly near the budget): costing sentences additively instead left 15% of the budget unused. Nothing is
segmented at read time: the sentences were split once, when their message was stored.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from services.chunking import ELISION, Run, SpanSentence, render_runs, sentence_runs
from services.text import WORD
from services.tokens import count_tokens, min_tokens

MIN_FILL_WORDS = 4  # a body line close to nothing is kept only with this many words (see `excerpt`)


@dataclass(frozen=True)
class Excerpt:
    """What `excerpt` returns. text: what to show (at most the budget's tokens); sentences: every sentence it was
    chosen from, in order; kept: the indexes of those shown, in order; runs: the rendered lines' runs (one per
    message shown, services/chunking.Run); tokens: count_tokens(text)."""

    text: str
    sentences: tuple[SpanSentence, ...]
    kept: tuple[int, ...]
    runs: tuple[Run, ...]
    tokens: int

    @property
    def whole(self) -> bool:
        """Nothing was left out: every sentence is shown."""
        return len(self.kept) == len(self.sentences)

    def ids(self) -> set[str]:
        """The ids of the sentences shown (add them to the `seen` of the next excerpt of the same block)."""
        return {self.sentences[i].id for i in self.kept}


def render(
    sentences: Sequence[SpanSentence], kept: Sequence[int], after: Mapping[str, str] | None = None
) -> tuple[str, list[Run]]:
    """The kept sentences (indexes, ascending) rendered with their elision marks, and their runs."""
    runs = sentence_runs([sentences[i] for i in kept], sentences, after)
    return render_runs(runs, stamps=False), runs


@lru_cache(maxsize=16384)
def _tokens(piece: str) -> int:
    return count_tokens(piece)


def _estimate(text: str) -> int:
    """Tokens of `text` counted line by line (cached) plus one per line break: at most one token per line break
    above the exact count in practice (the tokenizer merges a break with punctuation before it)."""
    return sum(_tokens(line) for line in text.split("\n")) + text.count("\n")


def _distances(best: list[bool]) -> list[int]:
    """Per position, how far the nearest True is (0 everywhere when there is none)."""
    n = len(best)
    if not any(best):
        return [0] * n
    out = [n] * n
    last = -n
    for i in range(n):
        last = i if best[i] else last
        out[i] = i - last
    last = 2 * n
    for i in range(n - 1, -1, -1):
        last = i if best[i] else last
        out[i] = min(out[i], last - i)
    return out


def _bare_line(sentences: Sequence[SpanSentence], i: int) -> bool:
    """Whether sentence `i` is a whole line of a message's body (not its first line) of fewer than MIN_FILL_WORDS
    words."""
    s = sentences[i]
    if s.index == 0 or "\n" not in s.gap or len(WORD.findall(s.text)) >= MIN_FILL_WORDS:
        return False
    nxt = sentences[i + 1] if i + 1 < len(sentences) else None
    return s.last or nxt is None or nxt.message_id != s.message_id or "\n" in nxt.gap


def excerpt(
    sentences: Sequence[SpanSentence],
    scores: Sequence[float],
    budget_tokens: int,
    seen: Collection[str] = frozenset(),
    groups: Sequence[Collection[int]] = (),
    after: Mapping[str, str] | None = None,
) -> Excerpt:
    """The sentences closest to the query (highest `scores`, aligned with `sentences`) that fit `budget_tokens`
    cl100k tokens, whole, in order (module doc). seen: ids of sentences already shown (left out). groups:
    indexes of sentences kept or left out together. after: sentence id -> a mark written after it (counted).
    Raises ValueError for a negative budget or scores of the wrong length."""
    if budget_tokens < 0:
        raise ValueError(f"budget_tokens must be >= 0, got {budget_tokens}")
    if len(scores) != len(sentences):
        raise ValueError(f"scores has {len(scores)} values for {len(sentences)} sentences")
    dropped = {i for i, s in enumerate(sentences) if s.id in seen}
    everything = [i for i in range(len(sentences)) if i not in dropped]
    if not dropped:
        text, runs = render(sentences, everything, after)
        # a text of more words than the budget cannot fit (services/tokens.min_tokens): no need to count
        if min_tokens(text) <= budget_tokens and (n := count_tokens(text)) <= budget_tokens:
            return Excerpt(text, tuple(sentences), tuple(everything), tuple(runs), n)
    group_of = {i: frozenset(g) for g in groups for i in g}
    top = max((scores[i] for i in everything), default=0.0)
    distance = _distances([top > 0 and c == top and i not in dropped for i, c in enumerate(scores)])
    # around the closest sentences, a line of a message's body close to nothing fills the budget only when it
    # says something: a list number, a heading or a name alone ("2.", "### Conclusion") costs its tokens and a mark
    order = sorted(
        (i for i in everything if top <= 0 or scores[i] > 0 or not _bare_line(sentences, i)),
        key=lambda i: (-scores[i], distance[i], i),
    )
    kept: set[int] = set()
    floor = 0  # a lower bound of the tokens of what is kept
    for i in order:
        together = group_of.get(i, frozenset({i})) - kept - dropped
        # each sentence's stored count (cl100k, of its text: services/chunking.split_message; an empty one's 1 is
        # taken as its 0) says what cannot fit without counting it again
        if i in kept or floor + sum(sentences[j].tokens for j in together if sentences[j].text) - 3 > budget_tokens:
            continue  # cannot fit
        trial = kept | together | {i}
        rendered, _ = render(sentences, sorted(trial), after)
        est = _estimate(rendered)
        # the estimate counts each line break apart, which the tokenizer often merges: count exactly when close
        low = est - rendered.count("\n")
        if est <= budget_tokens or (low <= budget_tokens and count_tokens(rendered) <= budget_tokens):
            kept, floor = trial, low
    ranked = {i: r for r, i in enumerate(order)}
    while True:
        shown = sorted(kept)
        out, runs = render(sentences, shown, after)
        n = count_tokens(out)
        if n <= budget_tokens:
            return Excerpt(out, tuple(sentences), tuple(shown), tuple(runs), n)
        # the estimate was short by a token or two: drop the least close sentence (with its group)
        worst = max((i for i in kept if i in ranked), key=lambda i: ranked[i])
        kept -= group_of.get(worst, frozenset({worst}))


__all__ = ["ELISION", "MIN_FILL_WORDS", "Excerpt", "excerpt", "render"]
