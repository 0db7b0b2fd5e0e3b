"""What a memory shows in the block: its stored sentences, whole at both ends, cut to what is closest to the query.

A memory is the stored sentences it covers (`Texts.piece`, read through datastore/write/spans.py `SpanReader`, the
reader summaries are made with): a chunk's, those of its window, each with its id, speaker and time; where the chunk
opens or closes inside a message of `long_turn` tokens or less, that whole message (a turn is shown whole); a
summary's, the sentences it picked (`MemoryNode.sentence_ids`; all the sentences under it when it names none: a
model's summary, a store written before summaries kept their sentences). The piece says which turns are short
(`short_turn` tokens or less, and whole: not the piece of a long message a window starts or ends inside). `cut`
keeps the sentences closest to the query (services/excerpts; `…` where text was left out): a short turn is kept or
left whole, never cut to a sentence. `Shown` records what the block already holds by sentence id, so no sentence is
shown twice: the sentences every memory shows (the overlap of two chunks), the recent turns', the instructions';
the messages shown whole, the nodes used. Text is rendered once, by the one renderer of sentences
(services/chunking), without stamps (the block writes dates on its date lines). The numbers (`short_turn`,
`long_turn`, `person_bonus`) are the block's policy's (datastore/context/policy.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from datastore.context.policy import DEFAULT_POLICY, BlockPolicy
from datastore.context.render import SUPERSEDED, Part
from datastore.read.lineage import fork_info
from datastore.storage import SourceRow, Storage
from datastore.write.spans import SpanReader, placed
from models.memory import MemoryNode, StoredMessage
from services import excerpts
from services.chunking import Run, SpanSentence, render_runs
from services.excerpts import Excerpt
from services.filler import is_filler
from services.tokens import fits


def fold(text: str) -> str:
    """`text` with its runs of whitespace folded to one space, trimmed."""
    return " ".join(text.split())


@dataclass
class Shown:
    """What the block holds so far: the ids of the sentences shown (`ids`; `memory`: those the memory sections
    show, not the instructions' or the recent turns'; `said`: those of them an excerpt showed, with their text,
    added by `say`; `spoken`: their folded texts, each with the ids of the messages it was shown from), the
    instructions' texts by the message they were said in (`quoted`, folded: a sentence of that message inside one
    is shown), messages shown whole, node ids used."""

    ids: set[str] = field(default_factory=set)
    memory: set[str] = field(default_factory=set)
    said: dict[str, SpanSentence] = field(default_factory=dict)
    spoken: dict[str, set[str]] = field(default_factory=dict)
    quoted: dict[str, list[str]] = field(default_factory=dict)
    messages: set[str] = field(default_factory=set)
    nodes: set[str] = field(default_factory=set)

    def say(self, sentences: Iterable[SpanSentence]) -> None:
        """Record sentences a memory section shows (`said`, `spoken`)."""
        for s in sentences:
            self.said[s.id] = s
            self.spoken.setdefault(fold(s.text), set()).add(s.message_id)

    def covers(self, node: MemoryNode) -> bool:
        """Whether everything the node holds is already shown (it was used, or all its messages were)."""
        return node.id in self.nodes or bool(node.message_ids) and set(node.message_ids) <= self.messages

    def holds(self, s: SpanSentence) -> bool:
        """Whether the sentence is shown: by id, or inside an instruction said in its message."""
        return s.id in self.ids or any(fold(s.text) in q for q in self.quoted.get(s.message_id, ()))

    def said_before(self, s: SpanSentence) -> bool:
        """Whether the memory sections show the very words of `s` (folded) said in another message: the same
        sentence said again later is shown once."""
        return any(m != s.message_id for m in self.spoken.get(fold(s.text), ()))

    def said_by_memory(self, message_id: str, text: str) -> bool:
        """Whether the memory sections show `text` of a message: the sentences of it they show, joined in order,
        hold it (folded)."""
        said = sorted((s for s in self.said.values() if s.message_id == message_id), key=lambda s: s.index)
        return bool(said) and fold(text) in " ".join(fold(s.text) for s in said)


@dataclass(frozen=True)
class Superseded:
    """The statements of instructions or preferences a later one replaced, by the message they were said in
    (folded; key None: message unknown): a sentence of that message inside one is marked SUPERSEDED where a
    memory shows it."""

    said: Mapping[str | None, Sequence[str]] = field(default_factory=dict)

    @classmethod
    def of(cls, statements: Iterable[tuple[str | None, str]]) -> Superseded:
        """From (message id, text) pairs."""
        said: dict[str | None, list[str]] = {}
        for mid, text in statements:
            if text.strip():
                said.setdefault(mid, []).append(fold(text))
        return cls(said)

    def holds(self, message_id: str | None, text: str) -> bool:
        """Whether `text` of that message states one of them."""
        t = fold(text)
        return bool(t) and any(t in q for k in (message_id, None) for q in self.said.get(k, ()))

    def marks(self, sentences: Sequence[SpanSentence]) -> dict[str, str]:
        """sentence id -> the mark written after it, for the sentences (in order) that state one: after the last
        sentence of a statement the splitter cut in several (at a line break), once."""
        if not self.said:
            return {}
        out: dict[str, str] = {}
        for k, s in enumerate(sentences):
            nxt = sentences[k + 1] if k + 1 < len(sentences) else None
            goes_on = nxt is not None and nxt.message_id == s.message_id and nxt.index == s.index + 1
            joined = f"{s.text} {nxt.text}" if nxt is not None and goes_on else ""
            if self.holds(s.message_id, s.text) and not (joined and self.holds(s.message_id, joined)):
                out[s.id] = f" {SUPERSEDED}"
        return out


@dataclass(frozen=True)
class Piece:
    """A memory as the block shows it: its stored sentences (`Texts.piece`), in order.

    short: the messages whose turn is short: whole, of at most `short_turn` tokens; each is kept or left out
    whole. A summary has none (its sentences are picks of many messages); a chunk's first or last turn is none
    when the window starts or ends inside a long message (its piece there is short, the message is not). own:
    the ids of the sentences of the node's own window (without the turns made whole)."""

    node: MemoryNode
    sentences: list[SpanSentence]
    short: frozenset[str]
    own: frozenset[str]


class Texts:
    """The stored sentences of memories, read once per request. storage: where the messages are read from (through
    the source's lineage, `SpanReader`). policy: `short_turn`, `long_turn`. sources: the source rows the block
    holds (by id; filled as it reads them), where a source's fork record is read from (a source not among them is
    read from the store)."""

    def __init__(
        self,
        storage: Storage,
        ns: str,
        policy: BlockPolicy = DEFAULT_POLICY,
        sources: Mapping[str, SourceRow] | None = None,
    ) -> None:
        self.storage = storage
        self.policy = policy
        self.ns = ns
        self.sources = sources if sources is not None else {}
        self._readers: dict[str, SpanReader] = {}
        self._pieces: dict[str, Piece] = {}

    def _reader(self, source_id: str) -> SpanReader:
        reader = self._readers.get(source_id)
        if reader is None:
            reader = self._readers[source_id] = SpanReader(self.storage, self.ns, source_id, forks=self._fork)
        return reader

    def _fork(self, source_id: str) -> dict[str, Any] | None:
        """The source's fork record, from the block's source rows when they hold it, else from the store."""
        row = self.sources.get(source_id)
        return row.metadata.get("fork") if row is not None else fork_info(self.storage, self.ns, source_id)

    def read(self, nodes: Iterable[MemoryNode] = (), said: Iterable[tuple[str, int]] = ()) -> None:
        """Read ahead, in one go a source (`SpanReader.read`), the stored sentences of `nodes` whose pieces are not
        made yet and those of the messages holding each (source id, stream token) of `said` (`said_at`): the
        later `piece` and `said_at` calls within them read nothing more."""
        todo: dict[str, tuple[list[MemoryNode], list[tuple[int, int]]]] = {}
        for n in nodes:
            if n.id not in self._pieces:
                todo.setdefault(n.source_id, ([], []))[0].append(n)
        for source_id, tok in said:
            todo.setdefault(source_id, ([], []))[1].append((tok, tok + 1))
        for source_id, (wanted, ranges) in todo.items():
            self._reader(source_id).read(wanted, ranges)

    def piece(self, node: MemoryNode) -> Piece:
        """The node's sentences and its short turns (see Piece)."""
        done = self._pieces.get(node.id)
        if done is not None:
            return done
        reader = self._reader(node.source_id)
        lo, hi = reader.extent(node)
        at = [(a, s, m) for m in (reader.messages(lo, hi) if hi > lo else []) for a, s in placed(m)]
        ids = set(node.sentence_ids) if node.level > 1 else set()
        own = [s for a, s, _ in at if lo <= a < hi and (not ids or s.id in ids)]
        if node.level != 1 or not own:
            done = Piece(node, own, frozenset(), frozenset(s.id for s in own))
        else:
            done = self._whole_turns(node, own, at)
        self._pieces[node.id] = done
        return done

    def _whole_turns(
        self, node: MemoryNode, own: list[SpanSentence], at: list[tuple[int, SpanSentence, StoredMessage]]
    ) -> Piece:
        """A chunk's piece: a message it opens or closes inside shown whole when it is `long_turn` tokens or less
        (a conversation's), else left as the window cut it; its short turns."""
        whole = {m.id: m for _, _, m in at}
        conversation = node.source_type == "conversation"
        ends = {own[0].message_id, own[-1].message_id}
        inside: set[str] = set()
        keep = {s.id for s in own}
        for mid in ends:
            cut = [s for _, s, m in at if m.id == mid and s.id not in keep]
            if not cut:
                continue
            if conversation and fits(whole[mid].content, self.policy.long_turn):
                keep |= {s.id for s in cut}
            else:
                inside.add(mid)
        sentences = [s for _, s, _ in at if s.id in keep]
        turns: dict[str, list[str]] = {}
        for s in sentences:
            turns.setdefault(s.message_id, []).append(s.text)
        short = {
            mid for mid, texts in turns.items() if mid not in inside and fits(" ".join(texts), self.policy.short_turn)
        }
        return Piece(node, sentences, frozenset(short), frozenset(s.id for s in own))

    def said_at(self, source_id: str, tok: int) -> list[SpanSentence]:
        """The stored sentences of the source's message holding stream token `tok` ([] when none)."""
        return [s for m in self._reader(source_id).messages(tok, tok + 1)[:1] for _, s in placed(m)]

    def text(self, node: MemoryNode) -> str:
        """The node's sentences rendered whole (no stamps)."""
        p = self.piece(node)
        return excerpts.render(p.sentences, range(len(p.sentences)))[0]


def dated(node: MemoryNode, runs: Sequence[Run]) -> list[Part] | None:
    """An excerpt's lines (`runs`) cut where the day changes: (time, lines) per run of lines said on one day, the
    time of the first; None when the node lies within one day or is no conversation's (it is shown under its
    span)."""
    start, end = node.start_time, node.end_time
    if node.source_type != "conversation" or start is None or end is None or start.date() == end.date():
        return None
    groups: list[tuple[datetime | None, list[Run]]] = []
    last: datetime | None = next((r.time for r in runs if r.time is not None), None)
    for r in runs:
        t = r.time or last
        last = t
        if groups and (t is None or (groups[-1][0] is not None and groups[-1][0].date() == t.date())):
            groups[-1][1].append(r)
        else:
            groups.append((t, [r]))
    return [(t, render_runs(rs, stamps=False)) for t, rs in groups]


def closeness(
    piece: Piece, query_terms: set[str], weights: Mapping[str, float], person_bonus: float = DEFAULT_POLICY.person_bonus
) -> list[float]:
    """Per sentence: the summed weights of the query's terms it holds (its speaker's name counted), plus
    `person_bonus` of the best weight when a person said it and it holds a query term; a short turn's sentences
    share their turn's best score, so the turn is kept or left whole."""
    top = max((weights.get(t, 0.0) for t in query_terms), default=0.0) or 1.0
    out = []
    for s in piece.sentences:
        held = query_terms & excerpts.terms_held(f"{s.speaker or ''} {s.text}")
        score = math.fsum(weights.get(t, 0.0) for t in held)  # exact: a set's order is the process's hash seed's
        if score and s.person:
            score += person_bonus * top
        out.append(score)
    for members in _turns(piece).values():
        if len(members) > 1 and piece.sentences[members[0]].message_id in piece.short:
            best = max(out[i] for i in members)
            for i in members:
                out[i] = best
    return out


def cut(
    piece: Piece,
    budget: int,
    query_terms: set[str],
    weights: Mapping[str, float],
    shown: Shown,
    people_first: bool = False,
    policy: BlockPolicy = DEFAULT_POLICY,
    superseded: Superseded | None = None,
) -> Excerpt | None:
    """The excerpt of a piece within `budget` tokens: its sentences closest to the query (people's first when
    `people_first`: a summary's lines of what the user brought up), those already shown left out, a superseded
    statement marked; None when nothing new fits."""
    if budget <= 0 or not piece.sentences:
        return None
    scores = closeness(piece, query_terms, weights, policy.person_bonus)
    if people_first:
        top = max(scores, default=0.0) or 1.0
        scores = [sc + (top if s.person else 0.0) for s, sc in zip(piece.sentences, scores, strict=True)]
    short = [m for m in _turns(piece).values() if piece.sentences[m[0]].message_id in piece.short]
    after = superseded.marks(piece.sentences) if superseded is not None else {}
    ex = excerpts.excerpt(piece.sentences, scores, budget, seen_in(piece, shown), short, after)
    if not ex.kept or not any(ch.isalnum() for ch in ex.text):
        return None
    return ex


def seen_in(piece: Piece, shown: Shown) -> set[str]:
    """The ids of the piece's sentences to leave out: those already shown (`Shown.holds`) or their very words said
    in another message (`Shown.said_before`), except inside a short
    turn (a turn is kept or left out whole), which is left out whole when all of it is shown, or each of its
    sentences that is not filler (services/filler.py) is shown by a memory section (its message's line, which
    holds what a short message says, is in the block: "Hi! I just got back from Norway." is not shown again
    after "I just got back from Norway."; an instruction's turn is still shown whole, and its line in the
    instructions section then goes)."""
    out: set[str] = set()
    if piece.node.level > 1:  # a summary's sentence stands for a message's: shown once
        return {s.id for s in piece.sentences if shown.holds(s) or shown.said_before(s)}
    for members in _turns(piece).values():
        said = [piece.sentences[i] for i in members]
        seen = [shown.holds(s) or shown.said_before(s) for s in said]
        if not any(seen):
            continue
        if said[0].message_id in piece.short:  # left out whole when all of it is shown, else kept whole
            names = piece.node.speakers
            if all(seen) or all(s.id in shown.memory or is_filler(s.text, names) for s in said):
                out.update(s.id for s in said)
            continue
        out.update(s.id for s, was in zip(said, seen, strict=True) if was)
    return out


def _turns(piece: Piece) -> dict[str, list[int]]:
    """The piece's sentence indices by message."""
    turns: dict[str, list[int]] = {}
    for k, s in enumerate(piece.sentences):
        turns.setdefault(s.message_id, []).append(k)
    return turns


def weights_of(texts: Iterable[str]) -> dict[str, float]:
    """IDF weights of terms over the candidates' texts (services/excerpts.term_weights)."""
    return excerpts.term_weights(texts)
