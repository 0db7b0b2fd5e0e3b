"""The context block: one token-budgeted text of what an assistant should know before it answers (POST /context).

Sections in priority order. Core, instructions and recent turns each take what they need, up to their share of
the budget (`shares`); the memories share the rest: relevant first, up to `relevant_share` of it (`assistant_chat_share`
in a chat where an assistant said most of the candidates' text, `overview_share` for a question about the course of
things, `asks_overview`), and the timeline what relevant leaves.

1. core, 2. instructions, 3. recent: datastore/context/sections.py.
4. relevant: datastore/context/relevant.py (its candidates: datastore/context/inputs.py, diversify.py).
5. timeline: datastore/context/timeline.py.
   When a query was asked, no memory passes the floor and no other section shows anything, the memories are one
   line, NOTHING ("No memory about this."), and the room is left unfilled.

The numbers named in `backticks` are fields of the block's policy (datastore/context/policy.py `BlockPolicy`);
`ContextAssembler.read` (datastore/context/inputs.py) reads what a block needs (the conversation's last messages, the
query's embedding, the retrieval candidates, core entries, instructions) before `_Assembly` builds it: here, each
section given its room in turn (`run`), then the block rendered within the budget (`_response`).

No sentence is shown twice (evidence.Shown: the id of every stored sentence shown, recent turns, instructions and
the overlap of consecutive chunks included), and a chunk whose messages are all among the recent turns is not
repeated.
Rendering (datastore/context/render.py): one date line per day, then the memories' lines.
`tokens_used` is the cl100k count of the rendered block and never exceeds the budget. Each chunk and summary a
block includes counts one visit.
"""

from __future__ import annotations

from datastore.context.inputs import InputReader
from datastore.context.relevant import Relevant
from datastore.context.render import HEADINGS, Section
from datastore.context.sections import FirstSections
from datastore.context.timeline import Timeline
from datastore.read.query import check_query_chars
from models.context import (
    CONTEXT_FIELDS,
    NOTHING,
    ContextRequest,
    ContextResponse,
    ContextSection,
    SectionName,
)
from services.tokens import count_tokens

MAX_LEFT_OUT = 50  # the most left-out memories a response lists


class ContextAssembler(InputReader):
    """assemble: the token-budgeted context block (the services it uses: `InputReader`, datastore/context/inputs.py).

    A block is made in two steps: `read` gathers what it needs (the request checked, the conversation's last
    messages, the query's embedding, the retrieval candidates, core entries and instructions), then `_Assembly`
    builds it from those inputs. What depends on the room a section is left (how many lines and periods to rank,
    the messages that make a shown chunk whole, a hit's neighbours) is read while assembling, through `lines`,
    `reader` and `storage`.
    """

    def assemble(self, ns: str, req: ContextRequest) -> ContextResponse:
        """Assemble the block (see the module doc). Raises InvalidRequestError (`budget_tokens`, `template`,
        `memory_template`) before reading anything. A conversation not yet remembered is an empty one (its core
        entries, the instructions and the namespace's memories still count). A `query` over MAX_QUERY_CHARS is
        the InvalidRequestError of /query (`check_query_chars`)."""
        check_query_chars(self.settings, req.query, "query")
        res = _Assembly(self, ns, req, self.read(ns, req)).run()
        self.visits.record(ns, [i.id for sec in res.sections for i in sec.items if i.kind in ("chunk", "summary")])
        return res


class _Assembly(FirstSections, Relevant, Timeline):
    """One block being assembled: each section given its room in turn, then the block rendered."""

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
            {
                i
                for i, text in self.instruction_texts.items()
                if i in self.instruction_messages and self.shown.said_by_memory(self.instruction_messages[i], text)
            }
        )
        if enabled["instructions"] and self.instruction_waiting:  # the room the block leaves unused, as rendered
            spare = self.budget - count_tokens(self._block(list(sections.values())))
            added = self._widen_instructions(sections["instructions"], spare)
            if added and count_tokens(self._block(list(sections.values()))) > self.budget:
                sections["instructions"].discard(added)  # not at a memory's cost
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
