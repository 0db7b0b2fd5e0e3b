"""What a block is assembled from (`Inputs`), read before assembly by `InputReader.read`: the request checked, the
conversation's last messages, the query's embedding, the retrieval candidates, core entries and instructions; and
the services a block reads through (`Lines`, `ActiveInstructions`).

The relevant memories' candidates are the same retrieval as /query (`mode`, default RETRIEVAL_MODE) for the query
(default: the latest message), over the whole namespace unless `all_conversations` is false, that pass the relevance
floor (close in meaning, CONTEXT_MIN_COSINE, or else a hybrid score of CONTEXT_MIN_SCORE or `min_score`: datastore/
read/ranking.py `Floor`; namespace-wide without a conversation, from the sources the query points at, `_focused`;
when none passes, a clearly leading best hit, `_clear_lead`). The numbers named in `backticks` are fields of the
block's policy (datastore/context/policy.py `BlockPolicy`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

import numpy as np

from datastore.context.core import CoreMemory
from datastore.context.policy import DEFAULT_POLICY, BlockPolicy
from datastore.context.questions import asks_overview, overview_topic
from datastore.context.render import template_fields
from datastore.lifetime.visits import Visits
from datastore.read.query import Reader
from datastore.read.ranking import Floor, passing
from datastore.storage import Hits, SourceRow, Storage
from models.api import QueryFilter
from models.context import CONTEXT_FIELDS, DEFAULT_CONTEXT_TEMPLATE, MEMORY_FIELDS, ContextRequest
from models.core import CoreEntry
from models.instructions import Instruction
from models.memory import StoredMessage
from models.settings import Settings
from models.time import utc
from services.embedding import Embedder
from services.errors import InvalidRequestError
from services.speakers import named_in

DEFAULT_BUDGET = 2000  # tokens, when a request names none (and CONTEXT_MAX_TOKENS allows it)


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
    @property
    def sentence_ids(self) -> tuple[str, ...]: ...
    @property
    def tok_start(self) -> int: ...
    @property
    def threaded(self) -> float | None: ...


class Lines(Protocol):
    """Where a conversation's lines come from, ranked for a query (datastore/read/outline.py `Outline`)."""

    def lines(
        self,
        ns: str,
        conversation_id: str,
        query_vector: np.ndarray | None = None,
        top_k: int | None = None,
        query_text: str | None = None,
        thread: tuple[float, float] | None = None,
        floor: Floor | None = None,
    ) -> Sequence[SaidLine]:
        """The `top_k` lines closest to the query over the whole conversation, oldest first, with scores; with
        `thread` (weight, gap seconds), by their scores raised by their thread neighbours' (`threaded`); with
        `floor`, those of them that pass it."""
        ...


class ActiveInstructions(Protocol):
    """Where the standing instructions come from (datastore/lifetime/instructions.py)."""

    def standing(self, ns: str) -> tuple[list[tuple[Instruction, np.ndarray]], list[Instruction]]:
        """The namespace's active instructions with their embeddings, and those a later one replaced."""
        ...


@dataclass(frozen=True)
class Inputs:
    """What a block is assembled from (ContextAssembler.read), read before assembly.

    budget: tokens (the request's, or DEFAULT_BUDGET within CONTEXT_MAX_TOKENS). template: the block's template.
    now: the time the block is written at. cid: the request's conversation when the store holds it as one (else
    None). source_row: the stored row of the request's conversation id (None: none stored; the block's fork records
    and source names read it). tail: its last messages (up to `budget` tokens of them), oldest first. query: the
    request's, else the latest message. overview: `asks_overview(query)`. topic: what the lines are ranked for
    (`overview_topic` for such a question, else the query). vector, topic_vector: their embeddings (None without a
    query or a section that needs one). flt: the conversation filter when `all_conversations` is false. nothing:
    that conversation is not yet remembered (no memories). hits: the read path's candidates that pass the relevance
    floor (`floor`), best first (namespace-wide: `ContextAssembler._focused`). sources: namespace-wide without a
    conversation, when the query names people who speak in the candidates' sources, those sources (source type, id:
    `_focused`), where the timeline's periods come from too; else empty. core: the core entries (when asked).
    instructions: the instructions in force with their embeddings (when asked). superseded: (message id, text) of
    the instructions a later one replaced (when a memory section is asked), marked where a memory shows their
    sentences (evidence.Superseded)."""

    budget: int
    template: str
    now: datetime
    cid: str | None
    source_row: SourceRow | None
    tail: list[StoredMessage]
    query: str | None
    overview: bool
    topic: str | None
    vector: np.ndarray | None
    topic_vector: np.ndarray | None
    flt: QueryFilter | None
    nothing: bool
    hits: Hits
    sources: list[tuple[str, str]]
    floor: Floor
    core: list[CoreEntry]
    instructions: list[tuple[Instruction, np.ndarray]]
    superseded: list[tuple[str | None, str]]


class InputReader:
    """Reads what a block is assembled from (`read`); the services a block uses.

    settings: CONTEXT_MAX_TOKENS, CONTEXT_MIN_SCORE, MAX_TOP_K, RETRIEVAL_MODE. embedder: the query's
    embedding (one call per block). reader: the relevant memories (the read path). core: the core section.
    visits: counts each chunk and summary the block includes. instructions: the standing instructions (None:
    no such section). lines: the conversation's lines ranked for the query (None: the timeline holds periods
    only). policy: the block's tuned numbers (datastore/context/policy.py; DEFAULT_POLICY).
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
        if req.relevant or req.timeline:  # a cold index loads while the messages are read and the query embedded
            self.reader.load_soon(ns)
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
        sources: list[tuple[str, str]] = []
        floor = self.floor(req)
        if (req.relevant or req.timeline) and vector is not None and query and not nothing:
            top_k = min(
                s.max_top_k,
                self.policy.max_candidates,
                max(self.policy.min_candidates, budget // self.policy.candidate_tokens),
            )
            hits = self.reader.search(ns, query, vector, top_k, flt, req.mode, floor)
            if flt is None:
                hits, sources = self._focused(ns, req, query, vector, top_k, hits, floor)
            if not hits:  # the candidates again, the floor aside: is the best one clearly the best?
                hits = self._clear_lead(ns, self.reader.search(ns, query, vector, top_k, flt, req.mode), vector)
        active: list[tuple[Instruction, np.ndarray]] = []
        superseded: list[tuple[str | None, str]] = []
        if self.instructions is not None and (req.instructions or req.recent or req.relevant or req.timeline):
            active, replaced = self.instructions.standing(ns)
            held = {" ".join(i.text.split()) for i, _ in active}  # said again later: it holds
            superseded = [(i.message_id, i.text) for i in replaced if " ".join(i.text.split()) not in held]
        return Inputs(
            budget=budget,
            template=template,
            now=utc(req.now) or datetime.now(UTC),
            cid=known,
            source_row=src,
            tail=tail,
            query=query,
            overview=overview,
            topic=topic,
            vector=vector,
            topic_vector=vectors[-1] if vectors is not None else None,
            flt=flt,
            nothing=nothing,
            hits=hits,
            sources=sources,
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
        return passing(self.reader.search_view, ns, hits, vector, floor)

    def _clear_lead(self, ns: str, hits: Hits, vector: np.ndarray) -> Hits:
        """When no hit passes the floor: the best one still counts if it is clearly the best (`clear_lead` times
        the next one's score) and related (cosine `lead_floor`). A small store's BM25 is weak (few texts, low
        IDF): "Which language do I want answers in?" reaches "From now on answer in French." this way."""
        if not hits:
            return []
        (top, best), second = hits[0], (hits[1][1] if len(hits) > 1 else 0.0)
        if best <= 0 or best < self.policy.clear_lead * second:
            return []
        vectors = self.reader.search_view.get_vectors(ns, [top.id])
        cosine = float(vectors[top.id] @ vector) if top.id in vectors else 0.0
        return hits[:1] if cosine >= self.policy.lead_floor else []

    def _focused(
        self, ns: str, req: ContextRequest, query: str, vector: np.ndarray, top_k: int, hits: Hits, floor: Floor
    ) -> tuple[Hits, list[tuple[str, str]]]:
        """A namespace-wide block's candidates, and the sources of the people its query names (source type, id;
        empty when it names none): the sources the query points at (those whose best passing hit
        scores at least `focus_ratio` of the best one's, and the one holding the hit closest in meaning: "When do
        we land in Lisbon, and what about Miso the cat?" is about two conversations; at most `focus_sources`), each
        ranked on its own as a block scoped to it ranks it, merged best first. A namespace holds many
        conversations: a chunk of another one that shares the query's common words no longer takes the room of the
        one it is about, nor pushes its chunks out of the ranked pool. A query that names people who speak in some
        of the sources (`services.speakers.named_in`: "What book is Jon reading?") points at those sources only:
        "Jon" and "John" embed alike, and in LoCoMo dev's one namespace the wrong one's conversation led 22 of the
        23 questions the namespace-wide block answered worse than the scoped one (RESULTS "stop9-notes")."""
        if not hits:
            return hits, []
        vectors = self.reader.search_view.get_vectors(ns, [n.id for n, _ in hits])
        cosine = {n.id: float(vectors[n.id] @ vector) for n, _ in hits if n.id in vectors}
        best, best_cosine = max(sc for _, sc in hits), max(cosine.values(), default=0.0)
        top: dict[tuple[str, str], tuple[float, float]] = {}
        people: dict[tuple[str, str], set[str]] = {}  # who speaks in each source's hits
        for n, sc in hits:
            s0, c0 = top.get((n.source_type, n.source_id), (0.0, -1.0))
            top[n.source_type, n.source_id] = (max(s0, sc), max(c0, cosine.get(n.id, -1.0)))
            people.setdefault((n.source_type, n.source_id), set()).update(n.speakers)
        ranked = sorted(top, key=lambda k: -top[k][0])
        named = named_in(query, set().union(*people.values()))
        r = self.policy.focus_ratio
        near = [k for k in ranked if top[k][0] >= r * best or top[k][1] >= best_cosine]
        if named:  # "What book is Jon reading?": the conversations Jon speaks in, not John's
            near = [k for k in ranked if people[k] & named]
        merged: Hits = []
        near = near[: self.policy.focus_sources]
        for source in near:
            merged += self.reader.search(ns, query, vector, top_k, source_filter(*source), req.mode, floor)
        merged.sort(key=lambda h: -h[1])
        return merged[:top_k], near if named else []


def source_filter(source_type: str, source_id: str) -> QueryFilter:
    """The filter of one source: a conversation's or a document's."""
    if source_type == "conversation":
        return QueryFilter(conversation_id=source_id)
    return QueryFilter(document_id=source_id)
