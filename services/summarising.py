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
from collections.abc import Collection
from dataclasses import dataclass
from typing import Protocol

from models.settings import Settings
from services import tokens as tok
from services.chunking import CONTINUATION, SPEAKER_LINE
from services.filler import content_words, is_filler
from services.openai_client import openai_client
from services.speakers import is_human
from services.text import WORD, fold, stem, words
from services.text import sentences as text_sentences

log = logging.getLogger(__name__)

_CUT_STAMP = re.compile(r"[^\[\]\n]{1,39}\] (?=\S)")  # the tail of `[YYYY-MM-DD HH:MM] ` (a window cut it)
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
    message: int  # the message (or, in a summary of summaries, the line) it is from; -1 for a document's text
    person: bool = False  # said by a person (services/speakers.py), not the assistant or a document
    info: float = 0.0

    @property
    def line(self) -> str:
        return f"{self.prefix}{self.text}"


_ROLES = frozenset({"user", "assistant", "system", "tool", "human", "ai", "bot"})


def _speaker_lines(texts: list[str]) -> set[str]:
    """The speakers of the lines that surely start a message: every speaker line but a text's first."""
    known: set[str] = set()
    for text in texts:
        lines = [ln for ln in text.splitlines() if ln.strip()]
        for ln in lines[1:]:
            if (m := SPEAKER_LINE.match(ln)) is not None:
                known.add(m["speaker"])
    return known


def _whole_speaker(speaker: str, known: set[str]) -> str | None:
    """The full name of a text's first speaker, which a chunk window may have cut ("anie" of "Melanie"): itself
    when known, capitalised or a role (user, assistant), the one known name it ends, else None (not a speaker
    line one can trust)."""
    if speaker in known:
        return speaker
    longer = [k for k in known if k.endswith(speaker) and k != speaker]
    if len(longer) == 1:
        return longer[0]
    trusted = speaker[:1].isupper() or speaker.casefold() in _ROLES
    return speaker if trusted and not longer else None


def _is_conversation(texts: list[str]) -> bool:
    """Whether the texts are a chat's: at least half of their lines that are not a message's later lines (indented)
    are speaker lines (a document's "Note: ..." line does not make it one)."""
    heads = [ln for t in texts for ln in t.splitlines() if ln.strip() and not ln.startswith(CONTINUATION)]
    return bool(heads) and 2 * sum(SPEAKER_LINE.match(ln) is not None for ln in heads) >= len(heads)


def _split(texts: list[str], context: str | None = None) -> list[_Sentence]:
    """Candidate sentences of the children, attributed `[stamp] speaker: `; overlap repeats removed.

    A message's later lines (indented, see services/chunking.render) are attributed to the speaker line above
    them, and so is a text's first line when it continues the message of the text before (a chunk that starts
    inside a message): its first sentence is dropped when it starts mid-sentence (the chunk overlap, which the
    chunk before holds whole; chunking cuts a long message at a sentence end), its other sentences are kept.
    A text's first speaker line may start inside the speaker's name ("anie: Sounds great!"): it is given the
    full name it ends, or dropped. In a conversation, a sentence whose speaker is unknown (the first text
    starts inside a message) is dropped: every line is a whole sentence under its speaker's full name.
    """
    out: list[_Sentence] = []
    prefix = ""
    known = _speaker_lines(texts + ([context] if context else []))
    names = {part for k in known for part in (k, k.split()[0])}
    conversation = _is_conversation(texts)
    message = -1
    for text in texts:
        lines = [ln for ln in text.splitlines() if ln.strip()]
        if lines and (cut := _CUT_STAMP.match(lines[0])) and SPEAKER_LINE.match(lines[0][cut.end() :]):
            lines[0] = lines[0][cut.end() :]  # a window that starts inside a line's time stamp: the line is whole
        for i, ln in enumerate(lines):
            m = SPEAKER_LINE.match(ln)
            skip_first = False
            if m is not None:
                speaker = m["speaker"] if i > 0 else _whole_speaker(m["speaker"], known)
                if speaker is None:
                    prefix, m = "", None
                    body = ""
                else:
                    prefix = f"{m['stamp'] or ''}{speaker}: "
                    body = ln[m.end() :]
                message += 1
            else:
                if i > 0 and not ln.startswith(CONTINUATION):
                    prefix = ""  # an unattributed line (a document's)
                    message += 1
                body = ln
                skip_first = i == 0 and not _starts_sentence(ln)
            if conversation and not prefix:
                continue  # a sentence whose speaker this summary cannot name
            person = bool(prefix) and is_human(prefix.split("] ")[-1][:-2])
            pieces = text_sentences(body.strip())
            if skip_first:
                pieces = pieces[1:]  # the tail of a sentence that the text before holds whole
            for sent in pieces:
                sent = sent.strip()
                if len(sent) < 2 or is_filler(sent, names):
                    continue
                terms = frozenset(stem(w) for w in words(sent) if w not in _STOP)
                info = informativeness(sent, names)
                out.append(_Sentence(len(out), prefix, sent, terms, message, person, info))
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
    (a chunk window starts at any token: "d in ledger 69. In 1970 ...", ", can't agree more!")."""
    head = line.lstrip()
    return (
        bool(head)
        and not line[0].isspace()
        and (head[0].isupper() or head[0].isdigit() or head[0] in "\"'\u201c\u2018([*-\u2022#>")
    )


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a and b else 0.0


class ExtractiveSummariser:
    """Picks real sentences of the children, never writes a word of its own.

    First what each person brought up: the most informative sentence of every message of a person
    (services/speakers.py; in a summary of summaries, every line of a person), so a summary tells what the user
    raised in that span. A sentence's worth is what it carries (`informativeness`: content words, names, numbers,
    dates), plus half its lexical centrality (its content terms weighted by how often the children use them,
    length-normalised). Then the rest of the budget with the other sentences. The selection is by maximal
    marginal relevance against the sentences already picked and the previous summary (context), until
    `max_tokens` is reached. Filler is never picked (services/filler.py): a summary says something or is empty.
    The picked lines are returned in their original order, each a whole sentence of a message under its speaker's full
    name, attributed `[time] speaker: ` as in the children. Deterministic; no model needed.
    """

    name = "extractive"

    def __init__(self, diversity: float = 0.5) -> None:
        self._lambda = 1.0 - diversity

    def summarise(self, texts: list[str], context: str | None, max_tokens: int) -> tuple[str, str]:
        """(summary, "extractive"); summary is at most max_tokens tokens, made of the children's sentences."""
        sents = _split(texts, context)
        if not sents:
            return "", self.name
        df = Counter(t for s in sents for t in s.terms)
        n = len(sents)
        central = {
            s.index: sum(math.log1p(df[t]) * math.log(1 + n / df[t]) for t in s.terms) / math.sqrt(len(s.terms) + 1)
            for s in sents
        }
        top_central = max(central.values()) or 1.0
        relevance = {s.index: s.info + 0.5 * central[s.index] / top_central for s in sents}
        top = max(relevance.values()) or 1.0
        context_terms = [s.terms for s in _split([context])] if context else []
        best_of: dict[int, _Sentence] = {}
        for s in sents:  # each person's message: its most informative sentence (the earliest of equals)
            if s.person and (s.message not in best_of or relevance[s.index] > relevance[best_of[s.message].index]):
                best_of[s.message] = s
        leads = {s.index for s in best_of.values()}
        picked: list[_Sentence] = []
        used = 0
        for pool in ([s for s in sents if s.index in leads], [s for s in sents if s.index not in leads]):
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
        if not picked:  # every sentence is longer than the budget: keep the head of the most informative one
            best = max(sents, key=lambda s: (s.index in leads, relevance[s.index]))
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
