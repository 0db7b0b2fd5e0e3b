"""Lines and the outline of a conversation: what was said, message by message, in its own words, under its dates.

**A line** is one message's informative lead (services/lines.py: its first sentence that is not filler, and for a
long message the sentence that states its point), with its own embedding, speaker, time, message id and
conversation. Lines are made by the `TreeBuilder` (datastore/write/build.py) for the messages a write newly
covers with chunks, embedded in the chunks' embedding call and committed in the chunks' WriteBatch, by every
writer: the inline remember and the late-message insertion (datastore/write/remember.py), the background chunk
step (datastore/indexing/steps.py) and the rebuild after a delete (datastore/write/delete.py), which reuses the
line (id and vector) of a kept message whose lead is unchanged.

**Why lines are nodes** (the design choice, weighed against a record kind of their own with a table and a
capability on every provider): a line is stored as a `MemoryNode` of **level 0**, outside the tree (no parent, no
children: it belongs to its message, and the tree's one rule, a node names a parent exactly when that parent
lists it, holds for every node), `message_ids` that message, `start_time`/`end_time` its time,
`tok_start`/`tok_end` its span in the token stream, position 0, 1, 2... in message order. So every provider's
node storage, vectors, transactional `commit`, `replace`/`delete_source`/`delete_namespace`, export and import
(datastore/portability/dump.py) and migrate (migrate.py) carry lines with no code of their own: one path for
nodes, lines included, and the least provider code. What a record kind would have cost: a table (SQLite,
PostgreSQL) or a record family (Pinecone) per provider, in their commit, deletes, counts, export, import and
migrate, three times. What level 0 costs instead, all of it a rule in one place each:
- searches never return lines: the search indexes above the providers hold level 0 apart, in the lines' own
  indexes that only `Outline` ranks through (datastore/indexes/namespaces.py);
  `QueryFilter.level` stays >= 1 for callers;
- the roll-up never groups lines, and they are never roots: `Frontier.from_nodes` leaves level 0 out of
  `pending`, and the providers' frontier, roots and `unrolled` read levels 1 and up only;
- listings and stats count levels 1 and up; `Storage.counts` and `/health` show `L0` (the lines) as they are;
- the forgetting policy, visits, pins, sessions and the context block read level 1 and up, as before.

**Reading lines** needs no search capability: lines are held in the namespace's shared in-memory indexes above the
providers, in a vector and a BM25 index of their own (datastore/indexes/namespaces.py `LineIndex`: searches of
chunks and summaries never see them), loaded and refreshed with the rest of the namespace by its version token,
so a line written by another process is ranked at the next read and a forgotten one never is. A query ranks a
conversation's lines there (`IndexedSearch.line_scores`: their cosines, one matrix product over that
conversation's rows, and BM25 over the lines' `speaker: text` restricted to them), `hybrid` as /query does
(datastore/read/ranking.py `fuse`, TEXT_WEIGHT), or by cosine alone when only a vector is given; only the lines
returned are read from the store (`get_nodes`, one read). The same way on every provider. Every line, unranked
(the outline without a query), is read with `Storage.source_nodes(level=0)`. A fork's outline holds its own lines
and those under its ancestors' chunks that it sees (datastore/read/lineage.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

import numpy as np

from datastore.indexes.search import IndexedSearch
from datastore.indexes.text import TextIndex
from datastore.read.lineage import Lineage, lineage, stream_messages
from datastore.read.ranking import POOL, TEXT_WEIGHT, Floor, fuse
from datastore.storage import Storage
from models.memory import MemoryNode, StoredMessage, sentence_id
from models.outline import UNDATED, OutlineDay, OutlineLine, OutlineResponse
from models.time import utc
from services.embedding import Embedder
from services.errors import NotFoundError
from services.filler import is_filler
from services.lines import spoken, whole_line
from services.text import text_terms
from services.tokens import count_tokens

FLOOR = Floor(words=0.2, meaning=0.35)  # the settings' defaults (CONTEXT_MIN_SCORE, CONTEXT_MIN_COSINE)


@dataclass(frozen=True)
class Line:
    """One line of a conversation (see the module docstring).

    id: the level-0 node's id. conversation_id: the source holding its message (an ancestor's, for a fork's
    inherited line). position: its index among that source's lines (message order). created_at: the message's
    time (None: untimed). text: the lead (and point). score: closeness to the query (`lines`: hybrid fusion in
    [0, 1], or cosine in [-1, 1] without a query text); None when no query was given. cosine: its cosine to the
    query (None without one). tokens: cl100k tokens of
    `text`. sentence_ids: the stored sentences its text is made of (empty for a line written before lines kept
    them). tok_start: where its message starts in its source's stream. threaded: its score raised by its thread
    neighbours' (`Outline.lines` with `thread`; else None)."""

    id: str
    message_id: str
    conversation_id: str
    speaker: str
    created_at: datetime | None
    text: str
    position: int
    tokens: int
    score: float | None = None
    cosine: float | None = None
    sentence_ids: tuple[str, ...] = ()
    tok_start: int = 0
    threaded: float | None = None

    @classmethod
    def of(cls, node: MemoryNode, score: float | None = None, cosine: float | None = None) -> Line:
        """The Line of a level-0 node."""
        return cls(
            id=node.id,
            message_id=node.message_ids[0] if node.message_ids else "",
            conversation_id=node.source_id,
            speaker=node.speakers[0] if node.speakers else "",
            created_at=utc(node.start_time),
            text=node.text,
            position=node.position,
            tokens=node.token_count or count_tokens(node.text),
            score=score,
            cosine=cosine,
            sentence_ids=tuple(node.sentence_ids),
            tok_start=node.tok_start,
        )


def day_of(line: Line) -> str:
    """The date a line is grouped under: YYYY-MM-DD (UTC) of its message, or UNDATED."""
    return line.created_at.date().isoformat() if line.created_at is not None else UNDATED


def render_line(line: Line) -> str:
    """`speaker: text`, as the outline shows a line (services/lines.spoken)."""
    return spoken(line.speaker, line.text)


class Outline:
    """The lines of a conversation, ranked or not, and its outline for people.

    storage: reads the conversation's lines when all of them are asked for (`source_nodes(level=0)`), the
    lines returned (`get_nodes`), its source row and a fork's lineage. search: ranks the lines through the
    namespace's shared in-memory line indexes (datastore/indexes/namespaces.py, `IndexedSearch.line_scores`),
    current with the store's namespace version: a line written by another process is ranked at the next read,
    a forgotten one never. embedder: the query's embedding (`outline` with a query). floor: the relevance floor
    (datastore/read/ranking.py `Floor`): its meaning floor (CONTEXT_MIN_COSINE) is where a line sharing no word
    with an outline's query is close enough to show.
    """

    def __init__(self, storage: Storage, embedder: Embedder, search: IndexedSearch, floor: Floor = FLOOR) -> None:
        self.floor = floor
        self.storage = storage
        self.embedder = embedder
        self.search = search

    def nodes(self, ns: str, conversation_id: str) -> list[MemoryNode]:
        """Every line node the conversation sees, oldest first (a fork's inherited lines before its own); [] for
        an unknown conversation. Read from the store."""
        out: list[MemoryNode] = []
        for sid, visible in reversed(lineage(self.storage, ns, conversation_id)):
            for n in self.storage.source_nodes(ns, sid, level=0):
                if visible is None or n.id in visible:
                    out.append(n)
        return out

    def lines(
        self,
        ns: str,
        conversation_id: str,
        query_vector: np.ndarray | None = None,
        top_k: int | None = None,
        query_text: str | None = None,
        thread: tuple[float, float] | None = None,
        floor: Floor | None = None,
    ) -> list[Line]:
        """The conversation's lines, oldest first (message order), each with its speaker, created_at, text,
        message_id and score; [] for an unknown conversation or one without lines (never raises for it).

        query_vector (float32, (dimension,), L2-normalised: `embedder.embed([query])[0]`): only the `top_k`
        lines closest to it over the whole conversation (all lines when top_k is None), still returned oldest
        first, each with its `score`: with `query_text` too, the hybrid fusion of /query (BM25 over the
        namespace's lines, restricted to the conversation's, and cosine, datastore/read/ranking.py `fuse`, in
        [0, 1]); without it, the cosine. Without a query_vector: every line (the first `top_k` when given),
        score None. Ties keep message order. What the /context block calls for the course of a conversation
        (overview questions, the timeline).

        thread (weight, gap seconds), with a query_vector: every line's score is raised to `weight` times its
        thread neighbours' (the lines just before and after it, oldest first, said within `gap` seconds of it,
        `threaded`), and the `top_k` lines by that (all when None; ties in message order) are returned, each
        with its own `score` and that `threaded` one: ranked from the index's times, so only the lines returned
        are read from the store (not every line of the conversation).

        floor, with a query_vector: of those `top_k`, only the lines whose score and cosine pass it are returned,
        and only they are read (datastore/read/ranking.py `Floor`)."""
        if query_vector is None:
            nodes = self.nodes(ns, conversation_id)
            return [Line.of(n) for n in (nodes if top_k is None else nodes[: max(0, top_k)])]
        if top_k is not None and top_k <= 0:
            return []
        # [(source, its line ids seen, None = all)], the oldest ancestor first: a fork sees its ancestors' lines of
        # the messages it inherits (datastore/read/lineage.py); a conversation that is no fork (its fork record
        # read once per namespace version, `fork_of`) is its own lineage
        sources: Lineage = [(conversation_id, None)]
        if self.search.fork_of(ns, conversation_id) is not None:
            sources = lineage(self.storage, ns, conversation_id)[::-1]
        terms = text_terms(query_text) if query_text else []
        pool = max(POOL, top_k) if top_k is not None and thread is None else _ALL  # threaded: every line scored
        ids, cosine, bm25, times = self.search.line_scores(ns, sources, query_vector, terms, pool)
        k = len(ids) if top_k is None or thread is not None else min(top_k, len(ids))
        scored = np.flatnonzero(~np.isnan(cosine))  # the lines with a cosine, in message order
        if len(scored) == 0 or k == 0:
            return []
        # by cosine, best first, ties in message order
        ranked = scored[np.argsort(-cosine[scored], kind="stable")].tolist()
        scores = _scores(ranked, cosine, bm25 if terms else None, k)
        if thread is None:  # the k best, oldest first
            raised, best = scores, sorted(scores)
        else:  # every line scored (k: all of them); ties in message order, as the timeline ranked every line
            raised = _threaded(scores, times, *thread)
            n = k if top_k is None else min(top_k, k)
            best = sorted(sorted(sorted(scores), key=lambda i: -raised[i])[:n])
        if floor is not None:
            best = [i for i in best if floor.passes(scores[i], float(cosine[i]))]
        by_id = {n.id: n for n in self.storage.get_nodes(ns, [ids[i] for i in best])}
        return [
            replace(Line.of(by_id[ids[i]], scores[i], float(cosine[i])), threaded=None if thread is None else raised[i])
            for i in best
            if ids[i] in by_id
        ]

    def outline(
        self, ns: str, conversation_id: str, query: str | None = None, budget_tokens: int = 2000
    ) -> OutlineResponse:
        """The conversation's outline: its lines grouped under their dates (UTC; untimed ones under
        'undated'), oldest first, rendered `[date]` then `speaker: line` per line (a lead cut inside its sentence
        shown whole, `_whole`), then `(N of M lines left
        out)` when some are, at most `budget_tokens` tokens (cl100k) of `text`. Without `query`: the lines from
        the oldest while they fit. With `query` (`relevant`): every sentence of the conversation that shares a
        word with it (BM25 over all its informative sentences, not only the leads: a lead sentence shows as its
        line; a conversation's own sentence index is small, so the words floor of /context does not apply: "Paris"
        in a conversation of three messages has a BM25 text strength of 0.18), best first, then the lines
        whose cosine to it reaches the meaning floor (CONTEXT_MIN_COSINE), closest first, while they fit, shown
        oldest first; nothing else: when nothing passes, the text says so in one line.
        Raises NotFoundError (field `conversation_id`) for a conversation the namespace does not hold (a
        document is not a conversation)."""
        src = self.storage.get_source(ns, conversation_id)
        if src is None or src.source_type != "conversation":
            raise NotFoundError(f"no conversation with id {conversation_id!r}", "conversation_id")
        title = src.metadata.get("title")
        every = self.lines(ns, conversation_id)
        if query is None:
            every = _whole(every, lambda: stream_messages(self.storage, ns, conversation_id))
            order = {line.id: i for i, line in enumerate(every)}
            shown = _fit(every, budget_tokens, order, stop=True)
        else:
            messages = stream_messages(self.storage, ns, conversation_id)
            ranked = _whole(self.relevant(ns, conversation_id, query, every), lambda: messages)
            order = _message_order(messages, ranked)
            shown = _fit(ranked, budget_tokens, order, stop=False)
        omitted = max(len(every) - len(shown), 0)
        text = render(shown)
        if query is not None and not shown:
            text = f"No line of this conversation is about {query!r}."
        elif omitted:
            note = f"({omitted} of {len(every)} lines left out)"
            while shown and count_tokens(f"{text}\n{note}") > budget_tokens:
                shown = shown[:-1] if query is None else _drop_last_ranked(shown, ranked)
                omitted = len(every) - len(shown)
                note = f"({omitted} of {len(every)} lines left out)"
                text = render(shown)
            text = f"{text}\n{note}" if text else note
        return OutlineResponse(
            conversation_id=conversation_id,
            title=title if isinstance(title, str) else None,
            query=query,
            total_lines=len(every),
            omitted=omitted,
            tokens=count_tokens(text) if text else 0,
            days=_days(shown),
            text=text,
        )

    def relevant(self, ns: str, conversation_id: str, query: str, every: Sequence[Line]) -> list[Line]:
        """What of the conversation answers `query`, best first (see `outline`): the sentences that share a
        term with it, by BM25 over the conversation's informative
        sentences (one per message: its best; a sentence inside the message's line shows as that line, scored
        so), then the lines whose cosine reaches the meaning floor (CONTEXT_MIN_COSINE), by cosine. Lines keep
        their ids; a sentence that is no line's gets its sentence id
        (`<message id>:<n>`)."""
        by_message = {line.message_id: line for line in every}
        names = {line.speaker for line in every}
        rows: list[tuple[StoredMessage, int, str]] = []
        for m in stream_messages(self.storage, ns, conversation_id):
            for i, s in enumerate(m.sentences):
                said = m.content[s.start : s.end]
                if not is_filler(said, names):
                    rows.append((m, i, said))
        found: list[Line] = []
        if rows and (words := text_terms(query)):
            index = TextIndex()
            index.add(
                list(range(len(rows))),
                [r[2] for r in rows],
                [1] * len(rows),
                [np.nan] * len(rows),
                [np.nan] * len(rows),
            )
            bm25 = index.scores(words)
            best: dict[str, tuple[float, int]] = {}
            for k in np.flatnonzero(bm25 > 0).tolist():
                mid = rows[k][0].id
                if mid not in best or bm25[k] > best[mid][0]:
                    best[mid] = (float(bm25[k]), k)
            for mid, (score, k) in sorted(best.items(), key=lambda kv: -kv[1][0]):
                m, i, said = rows[k]
                line = by_message.get(mid)
                sid = sentence_id(m.id, i)
                if line is not None and (sid in line.sentence_ids if line.sentence_ids else said in line.text):
                    found.append(replace(line, score=score))
                else:
                    found.append(
                        Line(
                            sid,
                            m.id,
                            m.source_id,
                            m.speaker,
                            utc(m.created_at),
                            said,
                            -1,
                            count_tokens(said),
                            score,
                            sentence_ids=(sid,),
                            tok_start=m.tok_offset,
                        )
                    )
        shown = {line.message_id for line in found}
        vector = self.embedder.embed([query])[0]
        close = [
            line
            for line in self.lines(ns, conversation_id, vector)
            if line.message_id not in shown and (line.score or 0.0) >= self.floor.meaning
        ]
        return found + sorted(close, key=lambda line: -(line.score or 0.0))


_ALL = 1 << 30  # a BM25 pool holding every line


def _whole(lines: Sequence[Line], messages: Callable[[], Sequence[StoredMessage]]) -> list[Line]:
    """`lines`, each lead cut inside its sentence shown as that whole sentence (services/lines.py `whole_line`, up to
    WHOLE_LINE_TOKENS) from its stored message; the conversation's `messages` are read only when a line is cut."""
    if not any(line.text.endswith("…") and line.sentence_ids for line in lines):
        return list(lines)
    by_id = {m.id: m for m in messages()}
    out: list[Line] = []
    for line in lines:
        m = by_id.get(line.message_id)
        idx = [int(sid.rsplit(":", 1)[1]) for sid in line.sentence_ids]
        if m is None or not idx or max(idx) >= len(m.sentences):
            out.append(line)
            continue
        text = whole_line(line.text, m.content, [m.sentences[i] for i in idx])
        out.append(line if text == line.text else replace(line, text=text, tokens=count_tokens(text)))
    return out


def _message_order(messages: Sequence[StoredMessage], lines: Sequence[Line]) -> dict[str, int]:
    """{line id: rank in the conversation's order}: by its message's place in the stream, then its sentence."""
    place = {m.id: k for k, m in enumerate(messages)}
    return {
        line.id: place.get(line.message_id, len(place)) * 100_000
        + int(line.id.rsplit(":", 1)[1] if ":" in line.id else 0)
        for line in lines
    }


def _drop_last_ranked(shown: list[Line], ranked: Sequence[Line]) -> list[Line]:
    """`shown` less its line ranked last (to make room for the count of lines left out)."""
    rank = {line.id: k for k, line in enumerate(ranked)}
    worst = max(shown, key=lambda line: rank.get(line.id, 0))
    return [line for line in shown if line.id != worst.id]


def _scores(ranked: list[int], cosine: np.ndarray, bm25: dict[int, float] | None, top_k: int) -> dict[int, float]:
    """{line: score} of the `top_k` best lines (`ranked`: the lines with a cosine, by it, best first, ties in
    message order; `cosine`: each line's, by index): by the cosine alone without a query text (bm25 None); else
    by the hybrid fusion (`fuse`) of the top max(POOL, top_k) of each list, best first (a line outside both
    pools would score 0.0, after them). A top_k of every line scores every line."""
    if bm25 is None:
        return {i: float(cosine[i]) for i in ranked[:top_k]}
    pool = max(POOL, top_k)
    pooled = {i: float(cosine[i]) for i in ranked[:pool]}
    text = {i: s for i, s in bm25.items() if not math.isnan(cosine[i])}
    pooled.update((i, float(cosine[i])) for i in text)
    return dict(fuse(pooled, text, TEXT_WEIGHT, top_k))


def _threaded(scores: dict[int, float], times: Sequence[float], weight: float, gap: float) -> dict[int, float]:
    """{line: its score raised to `weight` times its neighbours' in message order (the lines before and after
    it said within `gap` seconds; `times`: POSIX seconds, NaN for none, compared to the microsecond as the
    lines' datetimes are)."""
    out = dict(scores)
    order = sorted(scores)
    micros = [None if math.isnan(times[i]) else round(times[i] * 1e6) for i in order]
    for (a, ta), (b, tb) in zip(zip(order, micros, strict=True), zip(order[1:], micros[1:], strict=True), strict=False):
        if ta is None or tb is None or abs(tb - ta) / 10**6 > gap:
            continue
        out[a] = max(out[a], weight * scores[b])
        out[b] = max(out[b], weight * scores[a])
    return out


def _days(lines: Sequence[Line]) -> list[OutlineDay]:
    """The lines grouped under their dates, in the lines' order (a date seen again opens a new group)."""
    days: list[OutlineDay] = []
    for line in lines:
        day = day_of(line)
        if not days or days[-1].date != day:
            days.append(OutlineDay(date=day, lines=[]))
        days[-1].lines.append(
            OutlineLine(
                id=line.id,
                message_id=line.message_id,
                speaker=line.speaker,
                created_at=line.created_at,
                text=line.text,
                score=line.score,
            )
        )
    return days


def render(lines: Sequence[Line]) -> str:
    """`[YYYY-MM-DD]` (or `[undated]`) before each run of lines of one date, then `speaker: text` per line."""
    out: list[str] = []
    day = None
    for line in lines:
        if day_of(line) != day:
            day = day_of(line)
            out.append(f"[{day}]")
        out.append(render_line(line))
    return "\n".join(out)


def _fit(ranked: Sequence[Line], budget_tokens: int, order: dict[str, int], stop: bool) -> list[Line]:
    """The lines of `ranked`, in its order, taken while the outline rendered in message order (`order`: a line's
    index there) fits `budget_tokens`, returned in message order. `stop`: the first line that does not fit ends
    it (a chronology without gaps); else it is skipped and a shorter later one may still fit. Counted per line
    with its date line, then checked exactly on the rendered text."""
    chosen: list[Line] = []
    days: set[str] = set()
    used = 0
    for line in ranked:
        cost = count_tokens(render_line(line)) + 1
        day = day_of(line)
        extra = 0 if day in days else count_tokens(f"[{day}]") + 1
        if used + cost + extra > budget_tokens:
            if stop:
                break
            continue
        chosen.append(line)
        days.add(day)
        used += cost + extra
    while chosen and count_tokens(render(sorted(chosen, key=lambda line: order[line.id]))) > budget_tokens:
        chosen.pop()
    return sorted(chosen, key=lambda line: order[line.id])
