"""Summarisers: the offline extractive default and an OpenAI-compatible chat model.

A summariser turns the span of FAN_OUT consecutive nodes (the children: their stored sentences and their texts,
`Span`) into one summary of at most `max_tokens` tokens, seeing the previous summary of the same level as
context. Each returns a `Summary`: its text, the ids of the stored sentences it picked (the extractive one; a
model's summary has none) and the name of what made it (recorded on the node), e.g. `extractive` or
`openai:gpt-4o-mini`.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Protocol

from models.settings import Settings
from services import tokens as tok
from services.chunking import SpanSentence, render_sentences
from services.filler import content_words, is_filler
from services.openai_client import openai_client
from services.text import WORD, fold, stem, words

log = logging.getLogger(__name__)

_STOP = frozenset(
    "a an the and or but if of to in on at for with by from as is are was were be been being it its this that "
    "these those i me my we our you your he him his she her they them their what which who whom do does did "
    "have has had not no so too very just can will would should could about into than then there here when "
    "where why how all any both each more most other some such only own same also up down out over again "
    "yeah yes oh really like got get im s t m re ve ll d".split()
)
_MONTHS = frozenset(
    "january february march april may june july august september october november december monday tuesday "
    "wednesday thursday friday saturday sunday yesterday tomorrow tonight weekend week month year ago last "
    "next".split()
)


def informativeness(sentence: str, names: Collection[str] = ()) -> float:
    """What a sentence carries: its distinct content words, plus one for each name (a capitalised word not at its
    start), number and date word (months, weekdays, `yesterday`, `last week`)."""
    content = set(content_words(sentence, names))
    tokens = WORD.findall(sentence)
    skip = {w for n in names for w in words(n)}
    names_in = {t for t in tokens[1:] if t[0].isupper() and fold(t) not in skip}
    numbers = {t for t in tokens if any(ch.isdigit() for ch in t)}
    dates = {t.lower() for t in tokens if t.lower() in _MONTHS}
    return len(content) + len(names_in) + len(numbers) + len(dates)


@dataclass(frozen=True)
class Span:
    """What a summary is made of: `sentences`, the stored sentences of its span (services/chunking.SpanSentence:
    for a summary of chunks those of the messages the chunks show, for a summary of summaries those its
    children picked), in order, each once; `texts`, its children's texts (what a model reads); `context`, the
    text of the previous summary of the same level, and `context_sentences` the sentences it picked (empty when
    a model wrote it)."""

    sentences: Sequence[SpanSentence]
    texts: Sequence[str]
    context: str | None = None
    context_sentences: Sequence[SpanSentence] = ()


@dataclass(frozen=True)
class Summary:
    """A summary: its `text` (at most the budget's tokens), the ids of the sentences it is made of
    (`sentence_ids`, in order; empty when a model wrote it) and the name of what made it (`made_by`)."""

    text: str
    sentence_ids: list[str]
    made_by: str


class Summariser(Protocol):
    name: str

    def summarise(self, span: Span, max_tokens: int) -> Summary:
        """The summary of `span` in at most max_tokens tokens. Raises SummaryError when none can be made."""
        ...


@dataclass
class _Candidate:
    sentence: SpanSentence
    order: int
    terms: frozenset[str]
    info: float


def _terms(text: str) -> frozenset[str]:
    return frozenset(stem(w) for w in words(text) if w not in _STOP)


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a and b else 0.0


class ExtractiveSummariser:
    """Picks stored sentences of the span, never writes a word of its own.

    First what each person brought up: the most informative sentence of every message of a person
    (services/speakers.py), so a summary tells what the user raised in that span. A sentence's worth is what it
    carries (`informativeness`: content words, names, numbers, dates), plus half its lexical centrality (its
    content terms weighted by how often the span uses them, length-normalised). Then the rest of the budget with
    the other sentences; but a span of several days opens with its first day's most relevant sentence
    (`_opening`), so the summary carries the date its span starts on. The selection is by maximal marginal
    relevance against the sentences already picked and those of the previous summary (context), until
    `max_tokens` is reached. Filler is never picked (services/filler.py): a summary says something or is empty.
    The picked sentences, in their order in the span, are rendered once by the renderer chunks use
    (services/chunking.render_sentences: each line a message's whole sentences under its speaker, dated as in a
    chunk). Deterministic; no model needed.
    """

    name = "extractive"

    def __init__(self, diversity: float = 0.5) -> None:
        self._lambda = 1.0 - diversity

    def summarise(self, span: Span, max_tokens: int) -> Summary:
        """Summary(text of at most max_tokens tokens, the picked sentences' ids in order, "extractive")."""
        names = {part for s in span.sentences if s.speaker for part in (s.speaker, s.speaker.split()[0])}
        sents = [
            _Candidate(s, k, _terms(s.text), informativeness(s.text, names))
            for k, s in enumerate(span.sentences)
            if len(s.text.strip()) >= 2 and not is_filler(s.text, names)
        ]
        if not sents:
            return Summary("", [], self.name)
        df = Counter(t for c in sents for t in c.terms)
        n = len(sents)
        central = {
            c.order: math.fsum(math.log1p(df[t]) * math.log(1 + n / df[t]) for t in c.terms)
            / math.sqrt(len(c.terms) + 1)
            for c in sents
        }
        top_central = max(central.values()) or 1.0
        relevance = {c.order: c.info + 0.5 * central[c.order] / top_central for c in sents}
        top = max(relevance.values()) or 1.0
        context_terms = [_terms(s.text) for s in span.context_sentences]
        best_of: dict[str, _Candidate] = {}
        for c in sents:  # each person's message: its most informative sentence (the earliest of equals)
            mid = c.sentence.message_id
            if c.sentence.person and (mid not in best_of or relevance[c.order] > relevance[best_of[mid].order]):
                best_of[mid] = c
        leads = {c.order for c in best_of.values()}
        opening = _opening(sents, leads, relevance)
        picked: list[_Candidate] = []
        shown: set[str] = set()
        used = 0
        for pool in (
            opening,
            [c for c in sents if c.order in leads and c not in opening],
            [c for c in sents if c.order not in leads and c not in opening],
        ):
            while pool:

                def mmr(c: _Candidate) -> float:
                    seen = [p.terms for p in picked] + context_terms
                    redundancy = max((_jaccard(c.terms, o) for o in seen), default=0.0)
                    return self._lambda * relevance[c.order] / top - (1 - self._lambda) * redundancy

                best = max(pool, key=mmr)
                pool.remove(best)
                cost = _cost(best.sentence, best.sentence.message_id not in shown)
                if used + cost <= max_tokens:
                    picked.append(best)
                    shown.add(best.sentence.message_id)
                    used += cost
        while picked:  # the estimate left out stamps and joins: the last picked go until the text fits
            chosen = [c.sentence for c in sorted(picked, key=lambda c: c.order)]
            text = render_sentences(chosen)
            if tok.count_tokens(text) <= max_tokens:
                return Summary(text, [s.id for s in chosen], self.name)
            picked.pop()
        return Summary("", [], self.name)  # no sentence fits the budget


def _opening(sents: Sequence[_Candidate], leads: Collection[int], relevance: dict[int, float]) -> list[_Candidate]:
    """When the span covers more than one day, the sentence a summary opens with, so that its text carries the
    date its span starts on: the most relevant sentence of the first day, a person's lead before any other; else
    none (the selection alone decides)."""
    days = [c.sentence.time.date() for c in sents if c.sentence.time is not None]
    if len(set(days)) < 2:
        return []
    first = [c for c in sents if c.sentence.time is not None and c.sentence.time.date() == days[0]]
    return [max(first, key=lambda c: (c.order in leads, relevance[c.order], -c.order))]


def _cost(s: SpanSentence, opens_line: bool) -> int:
    """About the tokens a picked sentence adds to a summary: its own and a space, and for its message's first
    picked sentence the line break and `speaker: `."""
    return s.tokens + 1 + (tok.count_tokens(f"{s.speaker}: ") + 1 if opens_line and s.speaker else 0)


_PROMPT = (
    "You maintain the long-term memory of a chat assistant. Summarise the conversation excerpt below in at most "
    "{words} words. Keep every name, date, number and concrete fact; say who said or did what; invent nothing. "
    "The summary of the preceding excerpt is given for context only: do not repeat it."
)


class OpenAISummariser:
    """Summaries by any OpenAI-compatible chat model, with the client's retries and backoff on 429/5xx.

    On any failure after the retries it falls back to the extractive summary (and records `extractive`), so
    a flaky model never blocks remembering.
    """

    def __init__(self, settings: Settings, fallback: Summariser | None = None) -> None:
        self._client = openai_client(settings, "SUMMARISER=openai (the default when OPENAI_API_KEY is set)")
        self.model = settings.summary_model
        self.name = f"openai:{self.model}"
        self._fallback = fallback or ExtractiveSummariser()

    def summarise(self, span: Span, max_tokens: int) -> Summary:
        """Summary(text, [], "openai:<model>") of the children's texts (`span.texts`) or, after a failure, the
        extractive summary of the span's sentences."""
        user = ""
        if span.context:
            user += f"Summary of the preceding excerpt (context):\n{span.context}\n\n"
        user += "Excerpt:\n" + "\n".join(span.texts)
        try:
            resp = self._client.chat.completions.create(
                model=self.model,
                messages=[
                    {"role": "system", "content": _PROMPT.format(words=int(max_tokens * 0.7))},
                    {"role": "user", "content": user},
                ],
                max_tokens=max_tokens,
                temperature=0,
            )
            text = (resp.choices[0].message.content or "").strip()
            if not text:
                raise ValueError("empty completion")
            return Summary(tok.truncate(text, max_tokens), [], self.name)
        except Exception as exc:
            log.warning("summary model %s failed (%s); using the extractive summary", self.model, type(exc).__name__)
            return self._fallback.summarise(span, max_tokens)


def make_summariser(settings: Settings) -> Summariser:
    """The summariser the settings choose (SUMMARISER, else openai when OPENAI_API_KEY is set, else extractive)."""
    if settings.resolved_summariser == "openai":
        return OpenAISummariser(settings)
    return ExtractiveSummariser()
