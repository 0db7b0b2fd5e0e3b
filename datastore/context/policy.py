"""The context block's policy: every tuned number of the block in one place (`BlockPolicy`), each with the
measurement behind it.

The assembly (datastore/context/assemble.py and its sections) and the evidence cut (context/evidence.py) read these
numbers from the policy they are given (`ContextAssembler(..., policy=...)`; `DEFAULT_POLICY` unless a caller
passes another), so a benchmark can vary one (`dataclasses.replace(DEFAULT_POLICY, line_tokens=30)`) without
editing code. Budgets and token counts are cl100k tokens; shares are fractions of a room in [0, 1]; scores and
floors are on the scale named in each field (MiniLM cosine: unrelated texts score about 0 to 0.15).

Where a field cites bench/RESULTS.md it names the section holding the run (`Context block on BEAM` and its notes
"BEAM after the lines, on the h5b branch" / "BEAM before the lines"; `Context block on LoCoMo` and its notes
"Context: what the numbers say"; "Instruction detection on a labeled set").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from models.context import SectionName
from services.lines import WHOLE_LINE_TOKENS


def _shares() -> Mapping[SectionName, float]:
    return MappingProxyType({"core": 0.15, "instructions": 0.25, "recent": 0.35})


@dataclass(frozen=True)
class BlockPolicy:
    """The tuned numbers of the /context block (see the module docstring; each field says why its value)."""

    # ---- how the budget is shared between the sections
    shares: Mapping[SectionName, float] = field(default_factory=_shares)
    """Core, instructions and recent turns each take what they need up to this share of the room (the memories
    share the rest). Set with issue 17's block (RESULTS "Context: what the numbers say", 2026-11-25): recent turns
    at 35% are why `context+recent` is under `context` on LoCoMo. Instructions 0.2 -> 0.25 with every timeline's
    line of a long answer cut to one part (RESULTS "stop8-notes"): BEAM 11-20 @1000 knowledge_update 0.817 ->
    0.867, contradiction_resolution 0.812 -> 0.837, information_extraction 0.675 -> 0.667, the rest equal or up;
    the cut alone lost preference_following 0.717 -> 0.667 (a preference the room left over had held); 0.25 alone
    moved nothing @1000 and cost 0.01 overall @500. LoCoMo (no instructions) is unchanged."""
    relevant_share: float = 1.0
    """Of the memories' room, the relevant memories' share in a chat between people (the timeline gets what they
    leave). LoCoMo: a chunk of short turns holds an evidence turn verbatim more often than a period's lines do;
    `context, no timeline` equals `context` (RESULTS "Context: what the numbers say")."""
    assistant_chat_share: float = 0.4
    """The same where people said under `people_chat` of the candidates' text (a chat with an assistant). BEAM 11-20
    @1000 (RESULTS "BEAM after the lines, on the h5b branch"): 0.4 gave multi_session_reasoning 0.572; 0.25 gave
    0.592 but information_extraction 0.608 and temporal_reasoning 0.825, so 0.4 (was 0.6 before the lines)."""
    people_chat: float = 0.5
    """A chat is between people when people (not an assistant) said at least this share of the first
    `min_candidates` candidates' text."""
    overview_share: float = 0.35
    """The relevant memories' share for a question about the course of things (`questions.asks_overview`) when the block
    has no lines (no conversation, or no line source): the timeline's periods lead (issue 17's block)."""
    list_share: float = 0.0
    """With lines: the relevant memories' share for such a question; the dated list takes the rest. BEAM 11-20
    @1000 (h5b notes): 0 moved event_ordering 0.273 -> 0.348 and summarization 0.139 -> 0.185."""
    list_instructions_share: float = 0.1
    """The instructions' share in a block led by the dated list (closest first). BEAM 11-20 @1000 (h5b notes):
    event_ordering 0.348 -> 0.366, summarization 0.225 -> 0.235 against the general `shares` 0.2."""

    # ---- the timeline's lines (datastore/read/outline.py)
    line_share: float = 1.0
    """Of the timeline's room, what the lines closest to the query take before the periods. BEAM 11-20 @1000 (h5b
    notes): lines before any period moved event_ordering 0.129 -> 0.273 with the old shares."""
    line_tokens: int = 20
    """Lines asked for: one per this many tokens of room (a BEAM user line is ~30-50 tokens: asking for more lines
    than fit lets the block skip the ones already shown)."""
    min_lines: int = 10
    """At least this many lines are asked for (a small room still has candidates to skip to)."""
    max_lines: int = 120
    """At most this many (a 2000-token block holds ~60 lines of ~30 tokens)."""
    thread_weight: float = 0.6
    """In a dated list (a question about the course of things), a line scores at least this times its thread
    neighbours' scores (the lines just before and after it within `thread_gap_s`; 0: each line on its own), and
    every line of the conversation is ranked (not only the closest `line_tokens` per token of room). BEAM's
    evidence comes in exchanges: a message and its follow-up ("I think we'll start with Encanto at 2 PM.").
    BEAM 11-20 @1000 (RESULTS "BEAM: the dated list ranked by threads", 2026-11-26): event_ordering 0.380 ->
    0.459, multi_session_reasoning 0.547 -> 0.568 (0.5: 0.440 / 0.568; 0.7: 0.438 / 0.568; summarization 0.248 /
    0.248 / 0.264); applied to every block's lines it cost knowledge_update and preference_following 0.025.
    Held-out BEAM chats 1-10 (RESULTS "BEAM: the held-out chats"): 0 / 0.5 / 0.6 / 0.7 gave event_ordering 0.342 /
    0.358 / 0.371 / 0.371, multi_session_reasoning 0.529 / 0.567 / 0.567 / 0.571, summarization 0.244 / 0.252 /
    0.277 / 0.259: confirmed there (on chats 1-3 alone, 6 questions a type, it was not for summarization)."""
    thread_gap_s: float = 600.0
    """Seconds: lines this close are one exchange's (a message and its follow-up)."""
    whole_line_tokens: int = WHOLE_LINE_TOKENS
    """A line whose lead was cut inside its sentence (services/lines.py MAX_LINE_TOKENS, 60: what is embedded) is
    shown as the whole sentence when that is at most this long (the outline's too: services/lines.py
    WHOLE_LINE_TOKENS): a model reads whole sentences. BEAM 11-20 (RESULTS "stop8-notes"; the scorer counts a
    message only when a sentence of it is whole) @1000 overall 0.703 -> 0.721, temporal_reasoning 0.925 -> 0.975,
    contradiction_resolution 0.837 -> 0.897; 80 and 150 measured the same within 0.002."""
    line_misses: int = 8
    """The list stops after this many lines in a row that do not fit (the rest are as long or longer)."""

    # ---- the relevant memories (the read path's hits)
    candidate_tokens: int = 30
    """One retrieval candidate per this many tokens of budget (within min_candidates, max_candidates): a block
    of 1000 tokens draws from ~33 hits, ~6 of which fit whole or cut (issue 17's block)."""
    min_candidates: int = 10
    """The fewest candidates (a small budget still has hits to skip to when the first are shown already)."""
    max_candidates: int = 60
    """The most (latency: each candidate's text is weighed for terms; RESULTS "Context: what the numbers say")."""
    whole_hits: int = 1
    """The best hits shown whole (up to a chunk), whatever their turns: the best chunk often holds a question and
    its answer (issue 17's block; LoCoMo /context >= /query at every budget)."""
    hit_tokens: int = 80
    """The most tokens an excerpt of a later hit of long messages takes: several hits' closest sentences beat one
    hit's whole text (BEAM: contradiction_resolution 0.702 against /query's 0.450 at 1000, RESULTS "BEAM before
    the lines")."""
    hit_misses: int = 3
    """The relevant section stops after this many hits in a row that show nothing new."""
    session_free: int = 4
    """Hits of one session placed before its next one yields to other sessions (`diversify.diversified`)."""
    session_decay: float = 0.7
    """A hit's score is multiplied by this per hit of its session placed past `session_free`. LoCoMo multi-hop
    (RESULTS "Context: what the numbers say"): a lower cap or MMR over positions measured neutral to negative."""
    focus_ratio: float = 0.8
    """A block of the whole namespace (no conversation named, as a GPT asks) draws its memories from the sources
    whose best candidate passing the relevance floor scores at least this share of the best one (and the source
    of the hit closest in meaning), each ranked on its own (`inputs.InputReader._focused`). LoCoMo dev in one
    namespace, conversations conv-26/30/41, 80 questions each @1000 (RESULTS "Relevance floor", notes): evidence
    0.7178 with every source's candidates in one ranking, 0.7112 / 0.7220 / 0.7303 / 0.7269 at 0.6 / 0.7 / 0.8 /
    0.9, against 0.7418 for the scoped block; other conversations' share of the memory tokens 0.145 -> 0.082 at 0.8
    (all 1155 questions: 0.135 -> 0.058). What is left is mostly a question naming a person two conversations hold
    ("Jon", "John"): the wrong one leads."""
    focus_sources: int = 3
    """The most sources such a block draws from (one search each)."""

    clear_lead: float = 1.5
    """When no hit passes the relevance floor, the best one still counts when its score is this many times the
    next one's ..."""
    lead_floor: float = 0.25
    """... and its cosine reaches this (a small store's BM25 is weak; MiniLM: unrelated texts score about 0 to 0.15).
    LoCoMo and BEAM: no hit passes for 0.2% of LoCoMo's and none of BEAM's own questions (RESULTS "Relevance
    floor")."""

    # ---- standing instructions and preferences
    preference_floor: float = 0.15
    """A stated preference is shown when its cosine to the query reaches this and `preference_ratio` times the
    best preference's (instructions always are). bench/preference_topics.py (135 labeled pairs of a preference
    and a question; RESULTS "Instructions only from the person the memory belongs to"): precision 0.945, recall
    0.754 (at 0.25, where it was: 0.966 / 0.406, and "I'm vegetarian" was left out of a question about a
    restaurant, 0.18, or dinner, 0.20). "My favorite recipe is Chicken Pot Pie." scores 0.10-0.21 against
    questions about pets."""
    preference_ratio: float = 0.6
    """See `preference_floor`."""

    # ---- the timeline's periods (L2 summaries)
    period_tokens: int = 60
    """A timeline period is given about this many tokens (the number of periods follows from the room)."""
    max_periods: int = 40
    """The most periods searched for."""
    timeline_level: int = 2
    """The timeline's periods are summaries of this level (L2: about 1,000 tokens of chat each)."""

    # ---- items
    min_item: int = 16
    """Tokens: less room than this holds no useful line (a speaker, a date line and a few words)."""

    # ---- the evidence cut (datastore/context/evidence.py)
    short_turn: int = 80
    """Tokens: a turn this short is kept whole or left out whole (LoCoMo turns: ~25, BEAM user turns: ~46)."""
    long_turn: int = 120
    """Tokens: a turn at most this long is completed where a chunk cuts its end, and left to the chunk before (which
    holds it whole) where a chunk starts inside it; a longer one is cut at its sentences. A chunk of turns none
    longer than this is shown whole."""
    person_bonus: float = 0.15
    """Closeness added (times the best query term's weight) to a sentence a person said that holds a query term: the
    user's own words answer "what did I say" (BEAM: the user's evidence messages are found at 0.409 against
    /query's 0.196 @1000, RESULTS "BEAM before the lines")."""


DEFAULT_POLICY = BlockPolicy()
"""The policy every block uses unless its ContextAssembler is given another."""
