"""Summarisers: the offline extractive default and an OpenAI-compatible chat model.

A summariser turns the texts of FAN_OUT consecutive nodes (the children) into one summary of at most
`max_tokens` tokens, seeing the previous summary of the same level as context. Each returns the summary and the
name of what made it (recorded on the node), e.g. `extractive` or `openai:gpt-4o-mini`.
"""

from __future__ import annotations

import logging
import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Protocol

from models.settings import Settings
from services import tokens as tok
from services.chunking import CONTINUATION
from services.openai_client import openai_client
from services.speakers import is_human

log = logging.getLogger(__name__)

# a speaker line (services/chunking.render): a name never starts with whitespace, a message's later lines always do
_LINE = re.compile(r"^(?P<stamp>\[[^\]\n]{1,40}\] )?(?P<speaker>[^\s:\[\]][^:\n\[\]]{0,127}): (?P<body>.*)$")
_CUT_STAMP = re.compile(r"[^\[\]\n]{1,39}\] (?=\S)")  # the tail of `[YYYY-MM-DD HH:MM] ` (a window cut it)
_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])[\"')\]\u201d\u2019]*\s+")
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_STOP = frozenset(
    "a an the and or but if of to in on at for with by from as is are was were be been being it its this that "
    "these those i me my we our you your he him his she her they them their what which who whom do does did "
    "have has had not no so too very just can will would should could about into than then there here when "
    "where why how all any both each more most other some such only own same also up down out over again "
    "yeah yes oh really like got get im i'm it's that's".split()
)


class Summariser(Protocol):
    name: str

    def summarise(self, texts: list[str], context: str | None, max_tokens: int) -> tuple[str, str]:
        """(summary text of at most max_tokens tokens, name of the summariser that made it)."""
        ...


@dataclass
class _Sentence:
    index: int
    prefix: str
    text: str
    terms: frozenset[str]
    lead: bool = False  # the first sentence of a person's message (or a person's line of a summary)

    @property
    def line(self) -> str:
        return f"{self.prefix}{self.text}"


def _split(texts: list[str]) -> list[_Sentence]:
    """Candidate sentences of the children, attributed `[stamp] speaker: `; overlap repeats removed.

    A message's later lines (indented, see services/chunking.render) are attributed to the speaker line above
    them, and so is a text's first line when it continues the message of the text before (a chunk that starts
    inside a message): its first sentence is dropped when it starts mid-sentence (the chunk overlap, which the
    chunk before holds whole; chunking cuts a long message at a sentence end), its other sentences are kept.
    """
    out: list[_Sentence] = []
    prefix = ""
    for text in texts:
        lines = [ln for ln in text.splitlines() if ln.strip()]
        if lines and (cut := _CUT_STAMP.match(lines[0])) and _LINE.match(lines[0][cut.end() :]):
            lines[0] = lines[0][cut.end() :]  # a window that starts inside a line's time stamp: the line is whole
        parsed = [_LINE.match(ln) for ln in lines]
        for i, (ln, m) in enumerate(zip(lines, parsed, strict=True)):
            if m is not None:
                prefix = f"{m['stamp'] or ''}{m['speaker']}: "
            elif i > 0 and not ln.startswith(CONTINUATION):
                prefix = ""  # an unattributed line (a document's)
            body = m["body"] if m else ln
            first = m is not None and is_human(m["speaker"])
            pieces = _SENTENCE_SPLIT.split(body.strip())
            if m is None and i == 0 and not _starts_sentence(ln):
                pieces = pieces[1:]  # the tail of a sentence that the text before holds whole
            for sent in pieces:
                sent = sent.strip()
                if len(sent) < 2:
                    continue
                terms = frozenset(w for w in _WORD.findall(sent.lower()) if w not in _STOP)
                out.append(_Sentence(len(out), prefix, sent, terms, lead=first))
                first = False
    # drop exact repeats and fragments contained in a longer candidate (chunk overlap cuts lines in two)
    keep: list[_Sentence] = []
    seen: set[str] = set()
    for s in sorted(out, key=lambda s: -len(s.text)):
        key = s.line
        if key in seen or any(s.text in k.text and s.prefix in ("", k.prefix) for k in keep):
            continue
        seen.add(key)
        keep.append(s)
    return sorted(keep, key=lambda s: s.index)


def _starts_sentence(line: str) -> bool:
    """Whether a text's first line starts a sentence (a capital, a digit, a quote or a list mark), not inside one
    (a chunk window starts at any token: "d in ledger 69. In 1970 ...")."""
    head = line.lstrip()
    return bool(head) and not line[0].isspace() and (head[0].isupper() or not head[0].isalpha())


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a and b else 0.0


class ExtractiveSummariser:
    """Picks real sentences of the children, never writes a word of its own.

    First what each person brought up: the lead sentence of every message of a person (services/speakers.py;
    in a summary of summaries, every line of a person), so a summary tells what the user raised in that span
    (an L2 holds the lead of each user message under it; higher levels choose among them). Then the rest of the
    budget with the other sentences. Within each group the score is the sentence's content terms weighted by how
    often the children use them (a lexical centroid), length-normalised, and the selection is by maximal marginal
    relevance against the sentences already picked and the previous summary (context), until `max_tokens` is
    reached. The picked lines are returned in their original order, each attributed `[time] speaker: ` as in the
    children. Deterministic; no model needed.
    """

    name = "extractive"

    def __init__(self, diversity: float = 0.5) -> None:
        self._lambda = 1.0 - diversity

    def summarise(self, texts: list[str], context: str | None, max_tokens: int) -> tuple[str, str]:
        """(summary, "extractive"); summary is at most max_tokens tokens, made of the children's sentences."""
        sents = _split(texts)
        if not sents:
            return "", self.name
        df = Counter(t for s in sents for t in s.terms)
        n = len(sents)
        relevance = {
            s.index: sum(math.log1p(df[t]) * math.log(1 + n / df[t]) for t in s.terms) / math.sqrt(len(s.terms) + 1)
            for s in sents
        }
        top = max(relevance.values()) or 1.0
        context_terms = [s.terms for s in _split([context])] if context else []
        picked: list[_Sentence] = []
        used = 0
        # what each person's message brought up first (its lead sentence), then the rest by the same rule
        for pool in ([s for s in sents if s.lead], [s for s in sents if not s.lead]):
            while pool:

                def mmr(s: _Sentence) -> float:
                    seen = [p.terms for p in picked] + context_terms
                    redundancy = max((_jaccard(s.terms, o) for o in seen), default=0.0)
                    return self._lambda * relevance[s.index] / top - (1 - self._lambda) * redundancy

                best = max(pool, key=mmr)
                pool.remove(best)
                cost = tok.count_tokens(best.line) + 1
                if used + cost <= max_tokens:
                    picked.append(best)
                    used += cost
        if not picked:  # every sentence is longer than the budget: keep the head of the most central one
            best = max(sents, key=lambda s: (s.lead, relevance[s.index]))
            return tok.truncate(best.line, max_tokens), self.name
        return "\n".join(s.line for s in sorted(picked, key=lambda s: s.index)), self.name


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

    def summarise(self, texts: list[str], context: str | None, max_tokens: int) -> tuple[str, str]:
        """(summary, "openai:<model>") or, after a failure, the extractive (summary, "extractive")."""
        user = ""
        if context:
            user += f"Summary of the preceding excerpt (context):\n{context}\n\n"
        user += "Excerpt:\n" + "\n".join(texts)
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
            return tok.truncate(text, max_tokens), self.name
        except Exception as exc:
            log.warning("summary model %s failed (%s); using the extractive summary", self.model, type(exc).__name__)
            return self._fallback.summarise(texts, context, max_tokens)


def make_summariser(settings: Settings) -> Summariser:
    """The summariser the settings choose (SUMMARISER, else openai when OPENAI_API_KEY is set, else extractive)."""
    if settings.resolved_summariser == "openai":
        return OpenAISummariser(settings)
    return ExtractiveSummariser()
