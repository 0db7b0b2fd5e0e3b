"""The context block: one token-budgeted text of what an assistant should know before it answers (POST /context).

Sections in priority order. Core, instructions and recent turns each take what they need, up to their share of
the budget (`shares`); the memories share the rest: relevant first, up to `relevant_share` of it (`assistant_chat_share`
in a chat where an assistant said most of the candidates' text, `overview_share` for a question about the course of
things, `asks_overview`), and the timeline what relevant leaves.

1. core: the core-memory entries of the namespace and the conversation (datastore/context/core.py), most
   important first.
2. instructions: the standing instructions and preferences the user stated (datastore/lifetime/instructions.py),
   the closest to the query first; a preference only where the query comes near it (`preference_floor`, and
   `preference_ratio` of the best preference's cosine); one said
   in a recent turn, or in a short turn a memory shows whole (a turn is never cut), is read there.
3. recent: the conversation's last messages verbatim (from the stored messages, so also ones not yet indexed),
   newest kept first, shown oldest first.
4. relevant: the same retrieval as /query (`mode`, default RETRIEVAL_MODE) for the query (default: the latest
   message), over the whole namespace unless `all_conversations` is false, that pass the relevance floor (close
   in meaning, CONTEXT_MIN_COSINE, or else a hybrid score of CONTEXT_MIN_SCORE or `min_score`: datastore/read/
   ranking.py `Floor`; namespace-wide without a conversation, from the sources the query points at,
   `_focused`; when none passes, a clearly leading best hit, `_clear_lead`), drawn from several sessions
   (`diversified`); a chunk of short turns whole, a chunk of long messages cut to its sentences closest to the
   query (datastore/context/evidence.py), the best hit whole; each with its `neighbours` chunks when asked.
5. timeline: what happened when, oldest first and dated: the conversation's lines closest to the query
   (`lines`, datastore/read/outline.py: each message's lead, ranked hybrid over the whole conversation; `line_share`
   of the room), then the periods the query points at (the conversation's L2 summaries closest to it; chunks
   where it has none yet), each cut to its people's lines (a summary holds the lead sentence of each of their
   messages, services/summarising.py), then its sentences closest to the query. For a question about the course
   of things it is a dated list of lines closest to the question's topic (`overview_topic`), every line of the
   conversation ranked and each raised to `thread_weight` of its thread neighbours' score (a message and its
   follow-up), taking all the room the relevant memories leave them (`list_share`). A budget with no room for a
   useful line of it has none. Its lines and periods pass the same floor.
   When a query was asked, no memory passes the floor and no other section shows anything, the memories are one
   line, NOTHING ("No memory about this."), and the room is left unfilled.

The numbers named in `backticks` are fields of the block's policy (datastore/context/policy.py `BlockPolicy`);
`ContextAssembler.read` reads what a block needs (the conversation's last messages, the query's embedding, the
retrieval candidates, core entries, instructions) before `_Assembly` builds it.

A sentence that stated an instruction or preference a later one replaced is marked where a memory section
shows it (render.SUPERSEDED after it): the turn stays as history, and a model does not take it for a rule in force.

No line is shown twice (evidence.Shown: the fingerprint of every unit shown, recent turns, instructions and the
overlap of consecutive chunks included), and a chunk whose messages are all among the recent turns is not repeated.
Rendering (datastore/context/render.py): one date line per day, then the memories' lines.
`tokens_used` is the cl100k count of the rendered block and never exceeds the budget. Each chunk and summary a
block includes counts one visit.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

import numpy as np

from datastore.context import evidence
from datastore.context.core import CoreMemory
from datastore.context.evidence import Shown, Texts
from datastore.context.policy import DEFAULT_POLICY, BlockPolicy
from datastore.context.render import DATED, HEADINGS, Section, superseded_mark, template_fields
from datastore.lifetime.visits import Visits
from datastore.read.query import Reader, check_query_chars
from datastore.read.ranking import Floor
from datastore.storage import Hits, SourceRow, Storage
from models.api import QueryFilter
from models.context import (
    CONTEXT_FIELDS,
    DEFAULT_CONTEXT_TEMPLATE,
    MEMORY_FIELDS,
    NOTHING,
    ContextItem,
    ContextRequest,
    ContextResponse,
    ContextSection,
    SectionName,
)
from models.core import CoreEntry
from models.instructions import Instruction
from models.memory import MemoryNode, StoredMessage
from models.settings import Settings
from models.time import utc
from services import excerpts
from services.embedding import Embedder
from services.errors import InvalidRequestError
from services.lines import SEPARATOR
from services.speakers import is_human
from services.tokens import count_tokens

DEFAULT_BUDGET = 2000  # tokens, when a request names none (and CONTEXT_MAX_TOKENS allows it)
MAX_LEFT_OUT = 50  # the most left-out memories a response lists
_OVERVIEW = re.compile(
    r"\b(order|sequence|chronolog\w*|timeline|summar\w*|overview|recap|progress\w*|evolv\w*|over time|so far|"
    r"history|walk me through|step by step|first\w* .{0,40}\bthen|how .{0,30}\b(changed|developed|went)|"
    r"how many (different|distinct|unique|separate|kinds|types)|brought up|"
    r"how many\b.{0,60}\b(did|have) I (ever )?mention\w*|"
    r"across (all )?(of )?((our|my|the|these) )?(conversations|sessions|chats|discussions|messages|talks))\b",
    re.I,
)
_ASKED_BY_USER = re.compile(
    r"\bI(\s+have|'ve|\s+had|'d)?\s+(first\s+|ever\s+|originally\s+)?(brought up|bring up|mentioned|mention|raised|"
    r"asked|ask|said|say|told|talked about|shared|noted|described|discussed|wanted|planned)\b",
    re.I,
)
# the words of a question about the course of things that name no topic: left out of the query the lines are
# ranked for ("walk me through the order in which I brought up X across our conversations" ranks them for X)
_COURSE_WORDS = re.compile(
    r"\b(can|could|would|will) you\b|\bplease\b|\bwalk me through\b|\bgive me\b|\btell me\b|"
    r"\b(comprehensive|complete|brief|detailed|short|full|quick)\b|\b(summary|summari[sz]e|overview|recap)( of)?\b|"
    r"\b(in )?(the |what |which )?(order|sequence)( in which)?\b|\bin order\b|"
    r"\b(across|throughout|during|over|in|from|based on) (all )?(of )?((our|my|the|these) )?"
    r"((recent|past|previous|earlier|many) )?(conversations|sessions|chats|discussions|messages|talks)\b|"
    r"\bover the (past|last) (few |several |couple of )?(days|weeks|months|years)\b|"
    r"\b(has|have|had)( been)? (developed|evolved|changed|progressed)( and (developed|evolved|changed))?\b|"
    r"\bbrought up\b|\bmentioned\b|\bso far\b|\bover time\b|"
    r"\bdifferent\b|\bhow many\b|\bwe('ve| have)? (discussed|talked about|covered)\b",
    re.I,
)
_LEFT_OVER = re.compile(r"^((a|an|the|list|and)\s+)+", re.I)  # what a request's removed words leave in front


def overview_topic(query: str) -> str:
    """The topic of a question about the course of things: the question without the words that ask for an
    order, a summary or a count (_COURSE_WORDS); the question itself when little is left."""
    topic = " ".join(_COURSE_WORDS.sub(" ", query).split()).strip(" ,.?!")
    topic = _LEFT_OVER.sub("", topic)
    return topic if len(topic) >= 12 else query


def asks_what_user_said(query: str) -> bool:
    """Whether a question asks what the user (the asker) said, brought up or mentioned ("in what order did I
    bring up...", "how many ... have I mentioned"): the people's lines answer it, not the assistant's."""
    return _ASKED_BY_USER.search(query) is not None


def asks_overview(query: str) -> bool:
    """Whether a question asks about the course of things rather than a fact: the order things came up in, a
    summary, the progress or history of something ("in what order did I...", "summarise how my project went"), a
    count over the conversation ("how many different...", "across our conversations"). English cue words; a
    question without them gets the relevant memories first."""
    return _OVERVIEW.search(query) is not None


class SaidLine(Protocol):
    """One line of a conversation: a message's informative lead (datastore/read/outline.py `Line`)."""

    @property
    def id(self) -> str: ...
    @property
    def message_id(self) -> str: ...
    @property
    def conversation_id(self) -> str: ...
    @property
    def speaker(self) -> str: ...
    @property
    def created_at(self) -> datetime | None: ...
    @property
    def text(self) -> str: ...
    @property
    def position(self) -> int: ...
    @property
    def score(self) -> float | None: ...
    @property
    def cosine(self) -> float | None: ...


class Lines(Protocol):
    """Where a conversation's lines come from, ranked for a query (datastore/read/outline.py `Outline`)."""

    def lines(
        self,
        ns: str,
        conversation_id: str,
        query_vector: np.ndarray | None = None,
        top_k: int | None = None,
        query_text: str | None = None,
    ) -> Sequence[SaidLine]:
        """The `top_k` lines closest to the query over the whole conversation, oldest first, with scores."""
        ...


class ActiveInstructions(Protocol):
    """Where the standing instructions come from (datastore/lifetime/instructions.py)."""

    def standing(self, ns: str) -> tuple[list[tuple[Instruction, np.ndarray]], list[Instruction]]:
        """The namespace's active instructions with their embeddings, and those a later one replaced."""
        ...


def _when(n: MemoryNode | StoredMessage | Instruction | None) -> float:
    t = None
    if isinstance(n, MemoryNode):
        t = n.start_time or n.end_time
    elif isinstance(n, StoredMessage | Instruction):
        t = n.created_at
    return t.timestamp() if t is not None else 0.0


@dataclass(frozen=True)
class Inputs:
    """What a block is assembled from (ContextAssembler.read), read before assembly.

    budget: tokens (the request's, or DEFAULT_BUDGET within CONTEXT_MAX_TOKENS). template: the block's template.
    now: the time the block is written at. cid: the request's conversation when the store holds it as one (else
    None). tail: its last messages (up to `budget` tokens of them), oldest first. query: the request's, else the
    latest message. overview: `asks_overview(query)`. topic: what the lines are ranked for (`overview_topic` for
    such a question, else the query). vector, topic_vector: their embeddings (None without a query or a section
    that needs one). flt: the conversation filter when `all_conversations` is false. nothing: that conversation
    is not yet remembered (no memories). hits: the read path's candidates that pass the relevance floor (`floor`),
    best first (namespace-wide: `ContextAssembler._focused`). core: the
    core entries (when asked). instructions: the instructions in force with their embeddings (when asked).
    superseded: the sentences of the instructions a later one replaced (when a memory section is asked), marked
    where a memory shows them (render.superseded_mark)."""

    budget: int
    template: str
    now: datetime
    cid: str | None
    tail: list[StoredMessage]
    query: str | None
    overview: bool
    topic: str | None
    vector: np.ndarray | None
    topic_vector: np.ndarray | None
    flt: QueryFilter | None
    nothing: bool
    hits: Hits
    floor: Floor
    core: list[CoreEntry]
    instructions: list[tuple[Instruction, np.ndarray]]
    superseded: list[str]


class ContextAssembler:
    """assemble: the token-budgeted context block.

    settings: CONTEXT_MAX_TOKENS, CONTEXT_MIN_SCORE, MAX_TOP_K, RETRIEVAL_MODE. embedder: the query's
    embedding (one call per block). reader: the relevant memories (the read path). core: the core section.
    visits: counts each chunk and summary the block includes. instructions: the standing instructions (None:
    no such section). lines: the conversation's lines ranked for the query (None: the timeline holds periods
    only). policy: the block's tuned numbers (datastore/context/policy.py; DEFAULT_POLICY).

    A block is made in two steps: `read` gathers what it needs (the request checked, the conversation's last
    messages, the query's embedding, the retrieval candidates, core entries and instructions), then `_Assembly`
    builds it from those inputs. What depends on the room a section is left (how many lines and periods to rank,
    the messages that make a shown chunk whole, a hit's neighbours) is read while assembling, through `lines`,
    `reader` and `storage`.
    """

    def __init__(  # noqa: PLR0913 (the services it uses, each named at the one call in datastore/memory.py)
        self,
        settings: Settings,
        storage: Storage,
        embedder: Embedder,
        reader: Reader,
        core: CoreMemory,
        visits: Visits,
        instructions: ActiveInstructions | None = None,
        lines: Lines | None = None,
        policy: BlockPolicy = DEFAULT_POLICY,
    ) -> None:
        self.settings = settings
        self.policy = policy
        self.lines = lines
        self.storage = storage
        self.embedder = embedder
        self.reader = reader
        self.core = core
        self.visits = visits
        self.instructions = instructions

    def assemble(self, ns: str, req: ContextRequest) -> ContextResponse:
        """Assemble the block (see the module doc). Raises InvalidRequestError (`budget_tokens`, `template`,
        `memory_template`) before reading anything. A conversation not yet remembered is an empty one (its core
        entries, the instructions and the namespace's memories still count). A `query` over MAX_QUERY_CHARS is
        the InvalidRequestError of /query (`check_query_chars`)."""
        check_query_chars(self.settings, req.query, "query")
        res = _Assembly(self, ns, req, self.read(ns, req)).run()
        self.visits.record(ns, [i.id for sec in res.sections for i in sec.items if i.kind in ("chunk", "summary")])
        return res

    def read(self, ns: str, req: ContextRequest) -> Inputs:
        """What the block is assembled from (`Inputs`), read and embedded before assembly: the request checked
        (raises InvalidRequestError for `budget_tokens`, `template`, `memory_template` before reading anything),
        the conversation's source and its last messages, the query's embedding (one call, with the topic of a
        question about the course of things), the retrieval candidates, the core entries and the instructions in
        force. Reads only; nothing is counted or written."""
        s = self.settings
        budget = DEFAULT_BUDGET if req.budget_tokens is None else req.budget_tokens
        if req.budget_tokens is None:
            budget = min(budget, s.context_max_tokens)
        if not 0 < budget <= s.context_max_tokens:
            raise InvalidRequestError(
                f"budget_tokens must be between 1 and {s.context_max_tokens} (CONTEXT_MAX_TOKENS)", "budget_tokens"
            )
        template = req.template if req.template is not None else DEFAULT_CONTEXT_TEMPLATE
        template_fields(template, CONTEXT_FIELDS, "template")
        if req.memory_template is not None:
            template_fields(req.memory_template, MEMORY_FIELDS, "memory_template")
        cid = req.conversation_id
        src = self.storage.get_source(ns, cid) if cid is not None else None
        known = cid if src is not None and src.source_type == "conversation" else None
        tail = self.storage.messages(ns, known, max(0, src.n_tokens - budget)) if known and src else []
        query = req.query or (tail[-1].content if tail else None)
        wants_vector = req.relevant or req.timeline or req.instructions
        overview = asks_overview(query or "")
        # a question about the course of things ranks the lines for its topic (one embedding call for both)
        topic = overview_topic(query) if query and overview else query
        with_lines = req.timeline and self.lines is not None and known is not None
        texts = [query] + ([topic] if with_lines and topic != query else [])
        vectors = self.embedder.embed(texts) if query and wants_vector else None  # type: ignore[arg-type]
        vector = vectors[0] if vectors is not None else None
        # where the memories come from: the namespace, or this conversation only (all_conversations false)
        flt = None if req.all_conversations or cid is None else QueryFilter(conversation_id=cid)
        nothing = flt is not None and known is None  # a conversation not yet remembered holds none
        hits: Hits = []
        floor = self.floor(req)
        if (req.relevant or req.timeline) and vector is not None and query and not nothing:
            top_k = min(
                s.max_top_k,
                self.policy.max_candidates,
                max(self.policy.min_candidates, budget // self.policy.candidate_tokens),
            )
            found = self.reader.search(ns, query, vector, top_k, flt, req.mode)
            hits = self.passing(ns, found, vector, floor)
            if flt is None:
                hits = self._focused(ns, req, query, vector, top_k, hits, floor)
            hits = hits or self._clear_lead(ns, found, vector)
        active: list[tuple[Instruction, np.ndarray]] = []
        superseded: list[str] = []
        if self.instructions is not None and (req.instructions or req.recent or req.relevant or req.timeline):
            active, replaced = self.instructions.standing(ns)
            held = {" ".join(i.text.split()) for i, _ in active}  # said again later: it holds
            superseded = [i.text for i in replaced if " ".join(i.text.split()) not in held]
        return Inputs(
            budget=budget,
            template=template,
            now=utc(req.now) or datetime.now(UTC),
            cid=known,
            tail=tail,
            query=query,
            overview=overview,
            topic=topic,
            vector=vector,
            topic_vector=vectors[-1] if vectors is not None else None,
            flt=flt,
            nothing=nothing,
            hits=hits,
            floor=floor,
            core=self.core.entries(ns, req.conversation_id) if req.core else [],
            instructions=active if req.instructions else [],
            superseded=superseded,
        )

    def floor(self, req: ContextRequest) -> Floor:
        """The relevance floor of a block: by words CONTEXT_MIN_SCORE (or the request's `min_score`), by meaning
        CONTEXT_MIN_COSINE (datastore/read/ranking.py `Floor`)."""
        s = self.settings
        return Floor(
            words=s.context_min_score if req.min_score is None else req.min_score, meaning=s.context_min_cosine
        )

    def passing(self, ns: str, hits: Hits, vector: np.ndarray, floor: Floor) -> Hits:
        """The hits that pass the relevance floor (their hybrid score, their cosine to the query)."""
        vectors = self.storage.get_vectors(ns, [n.id for n, _ in hits])
        return [
            (n, sc) for n, sc in hits if floor.passes(sc, float(vectors[n.id] @ vector) if n.id in vectors else 0.0)
        ]

    def _clear_lead(self, ns: str, hits: Hits, vector: np.ndarray) -> Hits:
        """When no hit passes the floor: the best one still counts if it is clearly the best (`clear_lead` times
        the next one's score) and related (cosine `lead_floor`). A small store's BM25 is weak (few texts, low
        IDF): "Which language do I want answers in?" reaches "From now on answer in French." this way."""
        if not hits:
            return []
        (top, best), second = hits[0], (hits[1][1] if len(hits) > 1 else 0.0)
        if best <= 0 or best < self.policy.clear_lead * second:
            return []
        vectors = self.storage.get_vectors(ns, [top.id])
        cosine = float(vectors[top.id] @ vector) if top.id in vectors else 0.0
        return hits[:1] if cosine >= self.policy.lead_floor else []

    def _focused(
        self, ns: str, req: ContextRequest, query: str, vector: np.ndarray, top_k: int, hits: Hits, floor: Floor
    ) -> Hits:
        """A namespace-wide block's candidates: the sources the query points at (those whose best passing hit
        scores at least `focus_ratio` of the best one's, and the one holding the hit closest in meaning: "When do
        we land in Lisbon, and what about Miso the cat?" is about two conversations; at most `focus_sources`), each
        ranked on its own as a block scoped to it ranks it, merged best first. A namespace holds many
        conversations: a chunk of another one that shares the query's common words no longer takes the room of the
        one it is about, nor pushes its chunks out of the ranked pool."""
        if not hits:
            return hits
        vectors = self.storage.get_vectors(ns, [n.id for n, _ in hits])
        cosine = {n.id: float(vectors[n.id] @ vector) for n, _ in hits if n.id in vectors}
        best, best_cosine = max(sc for _, sc in hits), max(cosine.values(), default=0.0)
        top: dict[tuple[str, str], tuple[float, float]] = {}
        for n, sc in hits:
            s0, c0 = top.get((n.source_type, n.source_id), (0.0, -1.0))
            top[n.source_type, n.source_id] = (max(s0, sc), max(c0, cosine.get(n.id, -1.0)))
        r = self.policy.focus_ratio
        near = [
            k for k, (sc, cos) in sorted(top.items(), key=lambda kv: -kv[1][0]) if sc >= r * best or cos >= best_cosine
        ]
        merged: Hits = []
        for kind, sid in near[: self.policy.focus_sources]:
            flt = QueryFilter(conversation_id=sid) if kind == "conversation" else QueryFilter(document_id=sid)
            merged += self.passing(ns, self.reader.search(ns, query, vector, top_k, flt, req.mode), vector, floor)
        merged.sort(key=lambda h: -h[1])
        return merged[:top_k]


class _Assembly:
    """One block being assembled: the request, what is shown so far, the sections."""

    def __init__(self, owner: ContextAssembler, ns: str, req: ContextRequest, given: Inputs) -> None:
        self.o, self.ns, self.req, self.p = owner, ns, req, owner.policy
        self.storage = owner.storage
        self.given = given
        self.budget, self.template, self.now = given.budget, given.template, given.now
        self.cid, self.tail, self.query = given.cid, given.tail, given.query
        self.overview, self.topic = given.overview, given.topic
        self.vector, self.topic_vector = given.vector, given.topic_vector
        self.flt, self.nothing = given.flt, given.nothing
        self.shown = Shown()
        self.mark = superseded_mark(given.superseded)  # a superseded rule a memory shows is marked so
        self.texts = Texts(owner.storage, ns, self.p)
        self.query_terms = set(excerpts.terms(self.query or ""))
        self.candidates: list[tuple[MemoryNode, float]] = []
        self.weights: dict[str, float] = {}
        self.people_share = 1.0  # of the candidates' text, what people (not an assistant) said
        self.scores: dict[str, float] = {}
        self.instruction_messages: dict[str, str] = {}  # instruction id -> the message it was said in
        self.instruction_units: dict[str, set[str]] = {}  # instruction id -> the fingerprints of its line
        self.source_names: dict[str, str] = {}
        self.sources: dict[str, SourceRow] = {}  # the candidates' source rows, read at once (`_gather`)
        self.said_nothing = False  # no memory passed the floor: the relevant memories are one line (NOTHING)

    # ------------------------------------------------------------------ the block
    def run(self) -> ContextResponse:
        req = self.req
        frame = self.template.format_map(
            {k: "" if k not in ("user_name", "assistant_name") else getattr(req, k) for k in CONTEXT_FIELDS}
        )
        room = self.budget - count_tokens(frame)
        enabled = {
            "core": req.core,
            "instructions": req.instructions and self.o.instructions is not None,
            "recent": req.recent and bool(self.tail),
            "relevant": req.relevant and self.vector is not None,
            "timeline": req.timeline,
        }
        if enabled["relevant"] or enabled["timeline"]:
            self._gather()
        fill = {"core": self._fill_core, "instructions": self._fill_instructions, "recent": self._fill_recent}
        sections: dict[SectionName, Section] = {}  # by name, in the block's order (render.HEADINGS)
        for name in ("core", "instructions", "recent"):  # each takes what it needs, up to its share
            share = self.p.shares[name]
            if name == "instructions" and self.overview and req.timeline and self.o.lines and self.cid:
                share = self.p.list_instructions_share  # the dated list needs the room; the closest instructions stay
            sec = self._section(name, int(room * share))
            if enabled[name]:
                fill[name](sec)
            sections[name] = sec
        # an instruction said in a recent turn is read there, verbatim: its line is not repeated
        sections["instructions"].discard({i for i, m in self.instruction_messages.items() if m in self.shown.messages})
        memory = room - sum(x.used for x in sections.values())  # what the memories share
        listed = self.overview and enabled["timeline"] and self.o.lines is not None and self.cid is not None
        if listed:  # the dated list of lines leads; the relevant memories keep to their share
            fraction = self.p.list_share
        elif self.overview:
            fraction = self.p.overview_share
        else:  # a chat with an assistant: the user's lines are rare in it, and the timeline holds them
            fraction = self.p.relevant_share if self.people_share >= self.p.people_chat else self.p.assistant_chat_share
        share = memory if not enabled["timeline"] else int(memory * fraction)
        relevant = self._section("relevant", share)
        if enabled["relevant"] and share >= self.p.min_item:
            self._fill_relevant(relevant, share if listed else memory)
        sections["relevant"] = relevant
        timeline = self._section("timeline", memory - relevant.used)
        if enabled["timeline"]:
            self._fill_timeline(timeline)
        sections["timeline"] = timeline
        # a query no memory passes the floor for, and nothing else shown: one line says so (not the room filled
        # with what does not matter)
        self.said_nothing = bool(
            self.query and enabled["relevant"] and not self.given.hits and not any(x.entries for x in sections.values())
        )
        # an instruction said in a short turn a memory shows whole is read there (a turn is kept whole)
        sections["instructions"].discard(
            {i for i, units in self.instruction_units.items() if units <= self.shown.memory}
        )
        return self._response(list(sections.values()))

    def _response(self, sections: list[Section]) -> ContextResponse:
        """The block rendered from its sections (in order), its last items dropped while it is over the budget."""
        text = self._block(sections)
        used = count_tokens(text)
        if used > self.budget and self.said_nothing:  # no room for the line
            self.said_nothing = False
            text = self._block(sections)
            used = count_tokens(text)
        while used > self.budget:  # merges at the joins cost a token or two more than the parts: drop the last
            next(x for x in reversed(sections) if x.entries).drop_last()
            text = self._block(sections)
            used = count_tokens(text)
        return ContextResponse(
            context=text,
            tokens_used=used,
            budget_tokens=self.budget,
            query=self.query,
            sections=[
                ContextSection(
                    name=x.name, budget_tokens=x.budget, tokens_used=x.used, items=x.items, left_out=len(x.left_out)
                )
                for x in sections
            ],
            left_out=[lo for x in sections for lo in x.left_out][:MAX_LEFT_OUT],
        )

    def _section(self, name: SectionName, budget: int) -> Section:
        req = self.req
        return Section(
            name,
            budget,
            self.now,
            req.memory_template,
            req.max_memory_chars,
            req.conversation_id,
            self._source_name,
            mark=self.mark if name in DATED else None,
        )

    def _source_name(self, source_id: str) -> str:
        """How a date line names a memory's source other than the block's conversation: its title in quotes,
        else `conversation <id>` (`document <id>`)."""
        name = self.source_names.get(source_id)
        if name is None:
            src = self.sources.get(source_id) or self.storage.get_source(self.ns, source_id)
            title = (src.metadata.get("title") if src is not None else None) or ""
            kind = src.source_type if src is not None else "conversation"
            name = self.source_names[source_id] = (
                f"“{' '.join(str(title).split())}”" if title else f"{kind} {source_id}"
            )
        return name

    def _block(self, sections: list[Section]) -> str:
        parts: dict[str, str] = {x.name: x.text() for x in sections}
        if self.said_nothing:
            parts["relevant"] = NOTHING
        memories = "\n\n".join(
            f"{HEADINGS[x.name]}\n{parts[x.name]}"
            for x in sections
            if x.entries or (x.name == "relevant" and self.said_nothing)
        )
        return self.template.format_map(
            {"user_name": self.req.user_name, "assistant_name": self.req.assistant_name, "memories": memories, **parts}
        )

    # ------------------------------------------------------------------ retrieval, shared by relevant and timeline
    def _gather(self) -> None:
        """The candidates both memory sections draw from: the read path's hits for the query, above the floor
        (`ContextAssembler.read`), diversified across sessions; and the IDF weights of terms over their texts."""
        hits = self.given.hits
        if not hits:
            return
        self.scores = {n.id: sc for n, sc in hits}  # what an item reports: the read path's score
        self.candidates = diversified(hits, self.p)
        self.texts.prefetch(n for n, _ in self.candidates[: self.p.min_candidates])  # the first and last messages of
        # those likely shown, in one read (a later one is read when reached)
        self.sources = self.storage.get_sources(self.ns, list(dict.fromkeys(n.source_id for n, _ in self.candidates)))
        # over the stored texts: a chunk is made whole (a read of its messages) only when it is shown
        self.weights = evidence.weights_of(n.text for n, _ in self.candidates)
        said: dict[bool, int] = {True: 0, False: 0}
        for n, _ in self.candidates[: self.p.min_candidates]:
            for u in excerpts.segment(n.text, speakers=n.speakers):
                said[is_human(u.speaker)] += len(u.text)
        total = said[True] + said[False]
        self.people_share = said[True] / total if total else 1.0

    # ------------------------------------------------------------------ sections
    def _fill_core(self, sec: Section) -> None:
        for e in self.given.core:
            item = ContextItem(
                id=e.key,
                kind="core",
                level=0,
                text=f"{e.key}: {e.value}",
                source_id=e.conversation_id,
                start_time=e.updated_at,
                end_time=e.updated_at,
                why=f"core memory (importance {e.importance})",
                tokens=0,
            )
            sec.admit(item)

    def _fill_instructions(self, sec: Section) -> None:
        """Every instruction in force while the share holds them, the closest to the query first (cosine of
        their embeddings), then the newest; a preference only where the query comes near its topic
        (`preference_floor`, `preference_ratio`): "I prefer Bootstrap" matters to a question about CSS, not to one
        about dinner."""
        active = list(self.given.instructions)
        if not self.req.all_conversations and self.req.conversation_id is not None:  # this conversation's only
            active = [(i, v) for i, v in active if i.conversation_id == self.req.conversation_id]
        if self.vector is not None:
            q = np.asarray(self.vector, dtype=np.float32)
            active.sort(key=lambda iv: (-float(iv[1] @ q), -_when(iv[0])))
        else:
            active.sort(key=lambda iv: -_when(iv[0]))
        best = max(
            (float(v @ self.vector) for i, v in active if i.kind == "preference" and self.vector is not None),
            default=0.0,
        )
        for ins, vec in active:
            score = float(vec @ self.vector) if self.vector is not None else None
            if (
                ins.kind == "preference"
                and score is not None
                and score < max(self.p.preference_floor, self.p.preference_ratio * best)
            ):
                continue  # a preference matters where its topic comes up; an instruction applies to every answer
            item = ContextItem(
                id=ins.id,
                kind=ins.kind,
                level=0,
                text=ins.text,
                speaker=ins.speaker,
                source_id=ins.conversation_id,
                start_time=ins.created_at,
                end_time=ins.created_at,
                score=None if score is None else round(score, 6),
                why=f"a standing {ins.kind} stated in message {ins.message_id}",
                tokens=0,
            )
            if sec.admit(item):
                said = excerpts.fingerprints(f"{ins.speaker}: {ins.text}")
                self.shown.fingerprints |= said
                self.instruction_units[ins.id] = said
                if ins.message_id is not None:
                    self.instruction_messages[ins.id] = ins.message_id

    def _fill_recent(self, sec: Section) -> None:
        kept: list[StoredMessage] = []
        for m in reversed(self.tail):  # newest first
            item = ContextItem(
                id=m.id,
                kind="message",
                level=0,
                text=f"{m.speaker}: {' '.join(m.content.split())}",
                speaker=m.speaker,
                source_id=m.source_id,
                start_time=m.created_at,
                end_time=m.created_at,
                why="recent turn",
                tokens=0,
            )
            if not sec.admit(item, float(m.seq)):  # shown in the order said
                break
            kept.append(m)
        for m in kept:
            self.shown.messages.add(m.id)
            self.shown.fingerprints |= excerpts.fingerprints(f"{m.speaker}: {m.content}")

    def _node_item(self, n: MemoryNode, text: str, why: str, score: float | None) -> ContextItem:
        return ContextItem(
            id=n.id,
            kind="chunk" if n.level == 1 else "summary",
            level=n.level,
            text=text,
            speaker=", ".join(n.speakers) or None,
            source_id=n.source_id,
            start_time=n.start_time,
            end_time=n.end_time,
            score=None if score is None else round(float(score), 6),
            why=why,
            tokens=0,
        )

    def _show(
        self, sec: Section, n: MemoryNode, budget: int, why: str, score: float | None, people_first: bool = False
    ) -> bool:
        """Admit the excerpt of `n`'s text within `budget` tokens (and `max_memory_chars`) when something new
        fits."""
        limit = min(budget, sec.room_for(self._node_item(n, "", why, score)) - 2)  # a merge at a join
        if limit < self.p.min_item:
            return False
        piece = self.texts.piece(n)
        weights = self.weights or evidence.weights_of([piece.text])
        query = self.query or ""
        ex = evidence.cut(piece, query, limit, self.query_terms, weights, self.shown, people_first, self.p)
        while ex is not None and len(ex.text) > self.req.max_memory_chars and limit > self.p.min_item:
            limit = max(
                self.p.min_item, limit * self.req.max_memory_chars // len(ex.text) - 2
            )  # fewer units, still whole
            ex = evidence.cut(piece, query, limit, self.query_terms, weights, self.shown, people_first, self.p)
        if ex is None:
            return False
        item = self._node_item(n, ex.text, why, score)
        parts = self.texts.dated(n, ex.text)  # a node said over several days: each line under its own date
        for _ in range(3):
            over = sec.used + sec.cost(item, parts) - sec.budget
            if parts is None or over <= 0 or limit <= self.p.min_item:
                break
            limit = max(self.p.min_item, limit - over - 1)  # the date lines cost more than the span's one: cut more
            ex = evidence.cut(piece, query, limit, self.query_terms, weights, self.shown, people_first, self.p)
            if ex is None:
                return False
            item = self._node_item(n, ex.text, why, score)
            parts = self.texts.dated(n, ex.text)
        times = [t for t, _ in parts or [] if t is not None]
        if times:  # what the item shows was said from its first part to its last
            item.start_time, item.end_time = min(times), max(times)
        if not sec.admit(item, _when(n), parts):  # clipped to max_memory_chars
            return False
        self.shown.fingerprints |= ex.fingerprints()
        self.shown.memory |= ex.fingerprints()
        self.shown.nodes.add(n.id)
        if ex.whole:
            self.shown.messages.update(n.message_ids if n.level == 1 else [])
        return True

    def _fill_relevant(self, sec: Section, most: int) -> None:
        """The hits in their (diversified) order, each chunk of short turns whole, a chunk of long messages cut
        to its closest sentences (the first hit whole up to a chunk); the section may stretch to `most` tokens
        for its first item when its share cannot hold it (a small budget: the best chunk before a timeline)."""
        fails = 0
        for rank, (n, _) in enumerate(self.candidates):
            score = self.scores.get(n.id, 0.0)
            if fails >= self.p.hit_misses:
                break
            if self.shown.covers(n):
                continue
            group = [n]  # the hit first: its neighbours only with it (the section shows them in time order)
            if self.req.neighbours and n.level == 1:
                before, after = self.o.reader.neighbours(self.ns, n, self.req.neighbours, self.flt)
                group = [n] + before[::-1] + after
            whole = rank < self.p.whole_hits or self._short_turns(n)
            budget = self.o.settings.chunk_size + 2 * self.p.short_turn if whole else self.p.hit_tokens
            if not sec.entries and sec.budget < most:
                sec.budget = min(most, max(sec.budget, self._cost_whole(sec, n)))
            if sec.room < self.p.min_item:
                break
            for node in group:
                if self.shown.covers(node):
                    continue
                why = f"relevant to the query (score {score:.3f})" if node is n else f"neighbour of {n.id}"
                ok = self._show(sec, node, budget, why, score if node is n else None)
                if node is n:
                    fails = 0 if ok else fails + 1
                    if not ok:
                        break

    def _cost_whole(self, sec: Section, n: MemoryNode) -> int:
        """Tokens the section would take with `n` whole as its first item (heading and date line included)."""
        return sec.cost(self._node_item(n, self.texts.of(n), "", None)) + 2

    def _short_turns(self, n: MemoryNode) -> bool:
        """Whether the chunk is a chat of turns (none over LONG_TURN tokens): it is shown whole, such a chunk
        has no sentence to spare; a chunk of a long message (an assistant's answer, a document) is cut to its
        sentences closest to the query."""
        turns: dict[int, list[str]] = {}
        for u in self.texts.piece(n).units:
            turns.setdefault(u.turn, []).append(u.text)
        return all(count_tokens(" ".join(t)) <= self.p.long_turn for t in turns.values())

    def _fill_timeline(self, sec: Section) -> None:
        """What happened when: the conversation's lines closest to the query (`_fill_lines`: all the room for a
        question about the course of things, `line_share` of it otherwise), then the periods the query points at
        (their summaries closest to it, `timeline_level`), oldest first, each with its people's lines (what the
        user brought up) and then its sentences closest to the query; namespace-wide, the summaries of every
        conversation."""
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
        (`_threaded`). A line whose message or sentences the block already shows is left out."""
        assert self.o.lines is not None and self.cid is not None
        if room < self.p.min_item:
            return
        want = max(self.p.min_lines, min(self.p.max_lines, room // self.p.line_tokens))
        vector = self.topic_vector if self.overview else self.vector
        text = self.topic if self.overview else self.query
        threads = self.p.thread_weight > 0 and self.overview
        ranked = list(self.o.lines.lines(self.ns, self.cid, vector, None if threads else want, text))
        if self.overview and asks_what_user_said(self.query or ""):
            ranked = [ln for ln in ranked if is_human(ln.speaker)] or ranked
        scores = {ln.id: ln.score or 0.0 for ln in ranked}
        if threads:
            scores = self._threaded(ranked)
            ranked = sorted(ranked, key=lambda ln: -scores[ln.id])[:want]
        if not self.overview:  # a dated list keeps its ranked lines: the floor cost BEAM 11-20's event_ordering
            # 0.386 -> 0.334 and summarization 0.271 -> 0.255 @1000 (RESULTS "Relevance floor")
            ranked = [ln for ln in ranked if self.given.floor.passes(scores[ln.id], ln.cosine or 0.0)]
        ranked.sort(key=lambda ln: -scores[ln.id])
        topic = set(excerpts.terms(self.topic or ""))
        weights = excerpts.term_weights(ln.text for ln in ranked)
        start, fails = sec.used, 0
        for ln in ranked:
            if sec.used - start >= room or sec.room < self.p.min_item or fails >= self.p.line_misses:
                break
            if ln.message_id in self.shown.messages:
                continue
            text = ln.text
            if self.overview and SEPARATOR in text:  # a long answer's lead and point: one of them
                parts = text.split(SEPARATOR)
                near = [sum(weights.get(t, 0.0) for t in topic & set(excerpts.terms(x))) for x in parts]
                best = max(range(len(parts)), key=lambda k: (near[k], -k))  # the one nearer the topic
                text = parts[best] + f" {excerpts.ELISION}" if best == 0 else f"{excerpts.ELISION} {parts[best]}"
            said = f"{ln.speaker}: {text}" if ln.speaker else text
            units = excerpts.segment(said, speakers=[ln.speaker] if ln.speaker else ())
            fresh = [u for u in units if excerpts.fingerprint(u) not in self.shown.fingerprints]
            if not fresh:
                continue
            if len(fresh) < len(units):  # a sentence of it is shown already: the rest of the line only
                said = f"{ln.speaker}: " * bool(ln.speaker) + f" {excerpts.ELISION} ".join(u.text for u in fresh)
            prints = {excerpts.fingerprint(u) for u in fresh}
            item = ContextItem(
                id=ln.id,
                kind="line",
                level=0,
                text=said,
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
            self.shown.fingerprints |= prints
            self.shown.memory |= prints

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
        summary yet)."""
        if self.vector is None or not self.query or self.nothing:
            return []
        want = max(1, min(self.p.max_periods, sec.room // each))
        base = self.flt or (QueryFilter(conversation_id=self.cid) if self.cid else None)
        for level in (self.p.timeline_level, 1):
            flt = (base or QueryFilter()).model_copy(update={"level": level})
            hits = self.o.reader.search(self.ns, self.query, self.vector, want, flt, "hybrid")
            if hits:
                return self.o.passing(self.ns, hits, self.vector, self.given.floor)
        return []


def _when_line(line: SaidLine) -> float:
    return line.created_at.timestamp() + line.position * 1e-6 if line.created_at is not None else 0.0


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
