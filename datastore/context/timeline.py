"""The timeline: what happened when, oldest first and dated: the conversation's lines closest to the query (`lines`,
datastore/read/outline.py: each message's lead, ranked hybrid over the whole conversation; `line_share` of the
room), then the periods the query points at (the conversation's L2 summaries closest to it; chunks where it has none
yet), each cut to its people's lines (a summary holds the lead sentence of each of their messages,
services/summarising.py), then its sentences closest to the query. For a question about the course of things it is a
dated list of lines closest to the question's topic (`overview_topic`), every line of the conversation ranked and
each raised to `thread_weight` of its thread neighbours' score (a message and its follow-up), taking all the room the
relevant memories leave them (`list_share`). A budget with no room for a useful line of it has none. Its lines and
periods pass the same floor.

The numbers named in `backticks` are fields of the block's policy (datastore/context/policy.py `BlockPolicy`).
"""

from __future__ import annotations

import math

from datastore.context.evidence import fold
from datastore.context.inputs import SaidLine, source_filter
from datastore.context.questions import asks_what_user_said
from datastore.context.render import SUPERSEDED, Section
from datastore.context.state import BlockState
from models.api import QueryFilter
from models.context import ContextItem
from models.memory import MemoryNode
from services import excerpts
from services.chunking import SpanSentence, render_runs, sentence_runs
from services.lines import SEPARATOR, spoken
from services.speakers import is_human
from services.tokens import fits


class Timeline(BlockState):
    """Fills the timeline."""

    def _fill_timeline(self, sec: Section) -> None:
        """What happened when: the conversation's lines closest to the query (`_fill_lines`: all the room for a
        question about the course of things, `line_share` of it otherwise), then the periods the query points at
        (their summaries closest to it, `timeline_level`), oldest first, each with its people's lines (what the
        user brought up) and then its sentences closest to the query; namespace-wide, the summaries of the sources
        the relevant memories are drawn from (`Inputs.sources`)."""
        listed = False
        if self.o.lines is not None and self.cid is not None and self.vector is not None:
            before = len(sec.entries)
            self._fill_lines(sec, sec.room if self.overview else int(sec.room * self.p.line_share))
            listed = self.overview and len(sec.entries) > before
        periods = self._periods(sec, self.p.period_tokens)
        if listed:  # a dated list: a chunk would repeat its lines (a small conversation has no summaries yet)
            periods = [(p, score) for p, score in periods if p.level > 1]
        if not periods:
            return
        per = max(self.p.min_item + 8, min(self.p.period_tokens * 2, sec.room // len(periods)))
        self.texts.read(p for p, _ in periods)  # their sentences: one read a source
        for p, score in periods:
            if sec.room < self.p.min_item:
                break
            if self.shown.covers(p):
                continue
            what = "summarises a period the query points at" if p.level > 1 else "a part of the conversation"
            self._show(sec, p, per, what, score, people_first=True)

    def _fill_lines(self, sec: Section, room: int) -> None:
        """The conversation's lines closest to the query (for a question about the course of things: to its
        topic, `overview_topic`; only people's lines when it asks what the user said, `asks_what_user_said`),
        best first while `room` tokens hold them, shown oldest first under their dates: a dated list of what
        was brought up; of a long answer's lead and point, only the one nearer the topic (more lines fit). For
        such a question every line is ranked and each scores at least `thread_weight` of its thread neighbours'
        (`_threaded`). A line whose message, or every stored sentence it is made of, the block already shows is
        left out: a sentence is shown when its id is, when a standing instruction above states it
        (`Shown.holds`), or when its very words (folded) are, said in another message (an answer's boilerplate
        repeated); of a line some of whose sentences are shown, the others only; a lead cut inside its
        sentence (a line is embedded at most MAX_LINE_TOKENS long) is shown whole (`_line_text`). A line
        written before lines kept their sentences is left out only when its message is shown."""
        assert self.o.lines is not None and self.cid is not None
        if room < self.p.min_item:
            return
        want = max(self.p.min_lines, min(self.p.max_lines, room // self.p.line_tokens))
        vector = self.topic_vector if self.overview else self.vector
        text = self.topic if self.overview else self.query
        threads = self.p.thread_weight > 0 and self.overview
        people = self.overview and asks_what_user_said(self.query or "")
        if threads and not people:  # threaded from the index's times: only the `want` best lines are read
            thread = (self.p.thread_weight, self.p.thread_gap_s)
            ranked = list(self.o.lines.lines(self.ns, self.cid, vector, want, text, thread))
            scores = {ln.id: ln.threaded or 0.0 for ln in ranked}
            ranked.sort(key=lambda ln: -scores[ln.id])
        else:  # a dated list keeps its ranked lines: the floor cost BEAM 11-20's event_ordering 0.386 -> 0.334 and
            # summarization 0.271 -> 0.255 @1000 (RESULTS "Relevance floor"); another block's lines pass it
            floor = None if self.overview else self.given.floor
            ranked = list(self.o.lines.lines(self.ns, self.cid, vector, None if threads else want, text, floor=floor))
            if people:
                ranked = [ln for ln in ranked if is_human(ln.speaker)] or ranked
            scores = {ln.id: ln.score or 0.0 for ln in ranked}
            if threads:  # among people's lines only: every line read
                scores = self._threaded(ranked)
                ranked = sorted(ranked, key=lambda ln: -scores[ln.id])[:want]
        ranked.sort(key=lambda ln: -scores[ln.id])
        topic = set(excerpts.terms(self.topic or ""))
        weights = excerpts.term_weights(ln.text for ln in ranked)
        start, fails = sec.used, 0
        seen = set(self.shown.spoken)  # what the memories show, as said (folded)
        ahead, read_to = max(1, room // self.p.line_tokens), 0  # lines whose sentences are read at once
        for k, ln in enumerate(ranked):
            if sec.used - start >= room or sec.room < self.p.min_item or fails >= self.p.line_misses:
                break
            if ln.message_id in self.shown.messages:
                continue  # its message is shown already
            ids = set(ln.sentence_ids)
            if ids and k >= read_to:  # this line's sentences and the next lines' the room may hold: one read
                read_to = k + ahead
                self.texts.read(said=[(x.conversation_id, x.tok_start) for x in ranked[k:read_to] if x.sentence_ids])
            said = [s for s in self.texts.said_at(ln.conversation_id, ln.tok_start) if s.id in ids] if ids else []
            held = self.shown.ids | {s.id for s in said if self.shown.holds(s) or fold(s.text) in seen}
            if ids and ids <= held:
                continue  # every sentence it is made of is shown already (or its very words, said again)
            text = self._line_text(ln, said, held, topic, weights)
            if self.superseded.holds(ln.message_id, text.strip(f" {excerpts.ELISION}")):
                text += f" {SUPERSEDED}"
            item = ContextItem(
                id=ln.id,
                kind="line",
                level=0,
                text=spoken(ln.speaker, text),
                speaker=ln.speaker or None,
                source_id=ln.conversation_id,
                start_time=ln.created_at,
                end_time=ln.created_at,
                score=None if ln.score is None else round(float(ln.score), 6),
                why=f"a line of message {ln.message_id}, close to the query",
                tokens=0,
            )
            if sec.used - start + sec.cost(item) > room or not sec.admit(item, _when_line(ln)):
                fails += 1
                continue
            self.shown.ids |= ids
            self.shown.memory |= ids
            seen |= {fold(s.text) for s in said}

    def _line_text(
        self, ln: SaidLine, said: list[SpanSentence], held: set[str], topic: set[str], weights: dict[str, float]
    ) -> str:
        """What the timeline shows of a line (without its speaker): when some of its sentences (`said`, as stored)
        are shown already (`held`), its other sentences; a lead cut inside its sentence, the whole sentence (up to
        `whole_line_tokens`); of a long answer's lead and point, the one nearer the `topic` terms (by `weights`);
        else the line's text."""
        text = ln.text
        if {s.id for s in said} & held:  # a sentence of it is shown already: its other sentences only, as stored
            fresh = [s for s in said if s.id not in held]
            return render_runs(sentence_runs(fresh, said), stamps=False).removeprefix(f"{ln.speaker}: ")
        if said and text.endswith("…") and SEPARATOR not in text:  # a lead cut inside its sentence: whole
            whole = render_runs(sentence_runs(said, said), stamps=False).removeprefix(f"{ln.speaker}: ")
            return whole if fits(whole, self.p.whole_line_tokens) else text
        if SEPARATOR in text:  # a long answer's lead and point: one of them
            parts = text.split(SEPARATOR)
            near = [math.fsum(weights.get(t, 0.0) for t in topic & set(excerpts.terms(x))) for x in parts]
            best = max(range(len(parts)), key=lambda k: (near[k], -k))  # the one nearer the topic
            return parts[best] + f" {excerpts.ELISION}" if best == 0 else f"{excerpts.ELISION} {parts[best]}"
        return text

    def _threaded(self, lines: list[SaidLine]) -> dict[str, float]:
        """Each line's score raised to `thread_weight` times its thread neighbours' (the lines before and after it,
        oldest first, said within `thread_gap_s` seconds of it: one exchange's follow-ups), so a follow-up ("I
        think we'll start with Encanto at 2 PM.") is ranked with the message it follows up."""
        out = {ln.id: ln.score or 0.0 for ln in lines}
        w, gap = self.p.thread_weight, self.p.thread_gap_s
        for a, b in zip(lines, lines[1:], strict=False):
            if a.created_at is None or b.created_at is None:
                continue
            if abs((b.created_at - a.created_at).total_seconds()) > gap:
                continue
            sa, sb = a.score or 0.0, b.score or 0.0
            out[a.id] = max(out[a.id], w * sb)
            out[b.id] = max(out[b.id], w * sa)
        return out

    def _periods(self, sec: Section, each: int) -> list[tuple[MemoryNode, float]]:
        """The periods to show, best first: the summaries of `timeline_level` (L2: about 1,000 tokens each) closest
        to the query, as many as the room holds at `period_tokens` each (chunks where the conversation has no
        summary yet); namespace-wide without a conversation, of the sources the relevant memories are drawn from
        (`Inputs.sources`, each searched on its own, merged best first), else of the whole namespace."""
        if self.vector is None or not self.query or self.nothing:
            return []
        want = max(1, min(self.p.max_periods, sec.room // each))
        base = self.flt or (QueryFilter(conversation_id=self.cid) if self.cid else None)
        # namespace-wide: the sources the relevant memories are drawn from, each searched on its own
        scopes = (
            [base] if base is not None or not self.given.sources else [source_filter(*s) for s in self.given.sources]
        )
        for level in (self.p.timeline_level, 1):
            hits = []
            for scope in scopes:
                flt = (scope or QueryFilter()).model_copy(update={"level": level})
                hits += self.o.reader.search(self.ns, self.query, self.vector, want, flt, "hybrid")
            if hits:
                hits.sort(key=lambda h: -h[1])
                return self.o.passing(self.ns, hits[:want], self.vector, self.given.floor)
        return []


def _when_line(line: SaidLine) -> float:
    return line.created_at.timestamp() + line.position * 1e-6 if line.created_at is not None else 0.0
