"""Choosing and rendering an excerpt: the units closest to a query that fit a token budget, with elision marks.

**Excerpt** (`excerpt`). Units are ranked by closeness to the query: the summed weights of the query's terms a
unit holds (its speaker's name counted with it), plus NUMBER_BONUS times the query's top weight when the unit
holds a number or date the query names (a message's date is its session's stamp), or a caller's own scores.
Then ties go to units nearer the best ones and then to earlier ones. The best are kept whole, in their original
order, while the rendered excerpt fits `budget_tokens` (cl100k, counted on the rendered text); a whole line of a
message's body close to nothing (when some unit is close) fills the room only with MIN_FILL_WORDS words or more,
or as code (a heading, a list number or a name alone says nothing). A text that fits is returned as it is.

**Elision.** One mark, ELISION (`…`, one cl100k token), stands where text was left out, once per gap:
`Ann: … sentence` (the head of a line left out), `sentence … sentence` (inside a line), `sentence …` (the rest
of a line), a line `…` (whole lines; indented by CONTINUATION inside one message), or a header line `Ann: …`
before a kept later line of a message whose first line was left out (so the speaker is always shown).

**Speed**, measured once by hand (speed targets live in bench/, not in tests) on the shared 2-core development
machine at load 4: 40 LoCoMo chunks (176 tokens on average) each completed from its first message and excerpted
to 60 tokens, with `term_weights` over the 40 and a growing `seen`, median of 60 requests: 0.41 ms per chunk
cold (per-text caches empty), 0.27 ms warm; a request of 40 takes 18.7 ms of CPU cold (p95 23), 11.6 ms warm
(p95 17). So excerpt the chunks a section admits (about 10 at 60 tokens in a 600-token section), not every
candidate. The unit choice renders each trial and counts it line by line with cached counts (exactly near the
budget): costing units additively instead left 15% of the budget unused, and topping it up exactly was slower.
Sentence ends come from services/text.py (syntok), cached by line: a line seen before costs a dictionary look-up,
a new one about 0.2 ms (LoCoMo) to 3 ms (BEAM's long answers) the first time.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from services.chunking import CONTINUATION
from services.excerpts.dedup import fingerprint
from services.excerpts.lexical import _lexical
from services.excerpts.units import ELISION, Unit, segment
from services.text import WORD
from services.tokens import count_tokens

MIN_FILL_WORDS = 4  # a body line close to nothing is kept only with this many words (see `excerpt`)

Scores = Sequence[float] | Callable[[Unit], float]
"""A caller's closeness per unit: a list aligned with the units, or a function of a unit; higher is closer."""


@dataclass(frozen=True)
class Excerpt:
    """What `excerpt` returns. text: what to show (at most the budget's tokens); source: the text the units'
    spans index (the input); units: every unit of source; kept: the
    indexes of the units shown, in order; tokens: count_tokens(text)."""

    text: str
    source: str
    units: tuple[Unit, ...]
    kept: tuple[int, ...]
    tokens: int

    @property
    def whole(self) -> bool:
        """Nothing was left out: text is source."""
        return self.text == self.source

    @property
    def spans(self) -> list[tuple[int, int]]:
        """(start, end) character spans in source of the units shown, in order."""
        return [(self.units[i].start, self.units[i].end) for i in self.kept]

    def fingerprints(self) -> set[str]:
        """Fingerprints of the units shown (add them to the `seen` of the next excerpt of the same block)."""
        return {fingerprint(self.units[i]) for i in self.kept}


def _render(source: str, units: Sequence[Unit], kept: Sequence[int]) -> str:
    """The kept units (indexes, ascending) with the elision marks of the module doc."""
    out: list[str] = []
    prev: Unit | None = None
    for i in kept:
        u = units[i]
        if prev is not None and i == prev.index + 1:
            out += [source[prev.end : u.start], u.text]  # neighbours: what lies between them, verbatim
        elif prev is None and i == 0:
            if u.prefix and u.turn == 0:  # headless text whose speaker the caller gave: say it
                out.append(f"{u.prefix}{ELISION}\n")
            out += [source[: u.start].lstrip("\n"), u.text]
        elif prev is not None and u.line == prev.end_line:
            out += [f" {ELISION} ", u.text]
        else:
            header = bool(u.prefix) and not u.on_speaker_line and (prev is None or prev.turn != u.turn)
            if prev is not None and not prev.line_end and not header and u.line_start:
                out.append(f" {ELISION}")  # the rest of the previous line is the gap
                marked = True
            else:
                marked = header or not u.line_start
            if prev is not None:
                out.append("\n")
            if header:
                out.append(f"{u.prefix}{ELISION}\n")
            if not marked:
                same = prev is not None and prev.turn == u.turn and bool(u.prefix) and not u.on_speaker_line
                out.append(f"{CONTINUATION if same else ''}{ELISION}\n")
            lead = u.lead
            if not u.line_start and not lead.endswith(ELISION + " "):
                lead += f"{ELISION} "
            out += [lead, u.text]
        prev = u
    if prev is not None and prev.index < len(units) - 1:
        nxt = units[prev.index + 1]
        if nxt.line == prev.end_line:
            out.append(f" {ELISION}")
        else:
            same = nxt.turn == prev.turn and bool(nxt.prefix)
            out.append(f"\n{CONTINUATION if same else ''}{ELISION}")
    return "".join(out)


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


def _bare_line(u: Unit) -> bool:
    """Whether the unit is a whole line of a message's body (not its speaker's line, not code) of fewer than
    MIN_FILL_WORDS words."""
    return (
        u.line_start
        and u.line_end
        and not u.on_speaker_line
        and u.kind != "code"
        and len(WORD.findall(u.text)) < MIN_FILL_WORDS
    )


def excerpt(  # noqa: PLR0913 (the budget and the reader's context, each named at the call)
    text: str,
    query: str | None,
    budget_tokens: int,
    *,
    weights: Mapping[str, float] | None = None,
    scores: Scores | None = None,
    seen: Collection[str] = frozenset(),
    first_speaker: str | None = None,
    speakers: Collection[str] | None = None,
    groups: Sequence[Collection[int]] = (),
) -> Excerpt:
    """The units of `text` closest to `query` that fit `budget_tokens` cl100k tokens, whole, in order.

    text: a rendered chunk, message or document. query: the request's query (None or "": the text's head is
    kept). budget_tokens: the most tokens `Excerpt.text` may count (0 gives ""). weights: term -> weight
    (`term_weights` over the request's candidates; default: IDF over this text's units). scores: a
    caller's closeness per unit instead (a list aligned with `segment(source)`, or a function of a Unit);
    higher is closer. seen: fingerprints already shown elsewhere in the block: those units are left out. first_speaker,
    speakers: as in `segment`. groups: indexes of units kept or left out together (a short turn, whole or not
    at all), as a fenced block's fences go with its code. A text that fits (and holds nothing seen) comes back as
    it is. Raises ValueError for a negative budget or a `scores` list of the wrong length.
    """
    if budget_tokens < 0:
        raise ValueError(f"budget_tokens must be >= 0, got {budget_tokens}")
    source = text
    units = segment(source, first_speaker=first_speaker, speakers=speakers)
    if scores is not None and not callable(scores) and len(scores) != len(units):
        raise ValueError(f"scores has {len(scores)} values for {len(units)} units")
    dropped = {u.index for u in units if fingerprint(u) in seen} if seen else set()
    # cl100k never merges across a space, so a text of more words than the budget cannot fit: no need to count
    if not dropped and len(source.split()) <= budget_tokens:
        n = count_tokens(source)
        if n <= budget_tokens:
            return Excerpt(source, source, tuple(units), tuple(u.index for u in units), n)
    if scores is None:
        closeness = _lexical(units, query or "", weights)
    elif callable(scores):
        closeness = [float(scores(u)) for u in units]
    else:
        closeness = [float(s) for s in scores]
    fences: dict[int, list[int]] = {}
    for u in units:
        if u.kind == "fence" and u.block is not None:
            fences.setdefault(u.block, []).append(u.index)
    group_of = {i: frozenset(g) for g in groups for i in g}
    top = max((closeness[u.index] for u in units if u.index not in dropped), default=0.0)
    distance = _distances([top > 0 and c == top and i not in dropped for i, c in enumerate(closeness)])
    # around the closest units, a line of a message's body close to nothing fills the budget only when it says
    # something: a list number, a heading or a name alone ("2.", "### Conclusion") costs its tokens and an
    # elision mark (a sentence of a line, a speaker's first line and code are never left out for it)
    order = sorted(
        (
            u.index
            for u in units
            if u.index not in dropped
            and u.kind != "fence"
            and (top <= 0 or closeness[u.index] > 0 or not _bare_line(u))
        ),
        key=lambda i: (-closeness[i], distance[i], i),
    )
    kept: set[int] = set()
    floor = 0  # a lower bound of the tokens of what is kept
    for i in order:
        u = units[i]
        together = group_of.get(i, frozenset({i})) - kept - dropped
        if i in kept or floor + sum(_tokens(units[j].text) for j in together) - 3 > budget_tokens:  # cannot fit (it
            continue  # may replace a mark line, no more)
        trial = kept | together | {i} | set(fences.get(u.block, []) if u.block is not None else [])
        trial -= dropped
        rendered = _render(source, units, sorted(trial))
        est = _estimate(rendered)
        # the estimate counts each line break apart, which the tokenizer often merges: count exactly when close
        low = est - rendered.count("\n")
        if est <= budget_tokens or (low <= budget_tokens and count_tokens(rendered) <= budget_tokens):
            kept, floor = trial, low
    ranked = {i: r for r, i in enumerate(order)}
    while True:
        shown = sorted(kept)
        out = _render(source, units, shown)
        n = count_tokens(out)
        if n <= budget_tokens:
            return Excerpt(out, source, tuple(units), tuple(shown), n)
        # the estimate was short by a token or two: drop the least close unit (with its fences when it was the
        # block's last code line)
        worst = max((i for i in kept if i in ranked), key=lambda i: ranked[i])
        kept -= group_of.get(worst, frozenset({worst}))
        blk = units[worst].block
        if blk is not None and not any(units[j].block == blk and units[j].kind == "code" for j in kept):
            kept -= set(fences.get(blk, []))


def inline_elisions(text: str) -> str:
    """`text` with no line that is only ELISION (whole lines left out): such a line is written at the end of the
    line before it (` …`, once), or dropped at the head of the text."""
    out: list[str] = []
    for line in text.split("\n"):
        if line.strip() == ELISION:
            if out and not out[-1].rstrip().endswith(ELISION):
                out[-1] = out[-1].rstrip() + " " + ELISION
            continue
        out.append(line)
    return "\n".join(out)
