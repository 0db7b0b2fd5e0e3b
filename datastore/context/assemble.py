"""The context block: one token-budgeted text of what an assistant should know before it answers (POST /context).

Sections in priority order, each filled within its share of the budget (SHARES; a share left unused passes to
the next section, the last section takes whatever is left):

1. core: the core-memory entries of the namespace and the conversation (datastore/context/core.py), most
   important first.
2. recent: the conversation's last messages verbatim (from the stored messages, so also ones not yet indexed),
   newest kept first.
3. relevant: the same retrieval as /query (`mode`, default RETRIEVAL_MODE) for the query (default: the latest
   message), over the whole namespace unless `all_conversations` is false, above `min_score`, each optionally
   with its `neighbours` chunks (the read path's `Reader.search` and `Reader.neighbours`).
4. timeline: the rest of the conversation's history, summarised: the highest-level nodes whose span holds nothing
   already included, chosen by closeness to the query, the closest refined one level down while room remains.

A span is never spent twice: a node's span is the range of L1 positions under it (a level-n node at position p
covers L1 positions [p * F^(n-1), (p + 1) * F^(n-1)), F = FAN_OUT), and no included node's span meets another's;
a chunk whose messages are all among the recent turns is not repeated. `tokens_used` is the cl100k count of the
rendered block and never exceeds the budget. Each chunk and summary a block includes counts one visit.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache

import numpy as np

from pyramind.datastore.context.core import CoreMemory
from pyramind.datastore.lifetime.visits import Visits
from pyramind.datastore.read.query import Reader
from pyramind.datastore.storage import Storage
from pyramind.models.api import QueryFilter
from pyramind.models.context import (
    CONTEXT_FIELDS,
    DEFAULT_CONTEXT_TEMPLATE,
    DEFAULT_MEMORY_TEMPLATE,
    MEMORY_FIELDS,
    UNDATED_MEMORY_TEMPLATE,
    ContextItem,
    ContextRequest,
    ContextResponse,
    ContextSection,
    LeftOut,
    SectionName,
)
from pyramind.models.memory import MemoryNode, StoredMessage
from pyramind.models.settings import Settings
from pyramind.models.time import utc
from pyramind.services.embedding import Embedder
from pyramind.services.errors import InvalidRequestError, NotFoundError
from pyramind.services.terms import text_terms
from pyramind.services.timeago import time_ago
from pyramind.services.tokens import count_tokens

SHARES: dict[SectionName, float] = {"core": 0.15, "recent": 0.35, "relevant": 0.3, "timeline": 0.2}
HEADINGS = {
    "core": "## Core memory",
    "recent": "## Recent turns",
    "relevant": "## Relevant memories",
    "timeline": "## Earlier, summarised",
}
DEFAULT_BUDGET = 2000
MAX_LEFT_OUT = 50
MAX_ROOTS = 64  # a tree has few roots (about FAN_OUT per level); a flat store's latest 64 chunks stand in
LEXICAL = 0.5  # weight of shared words in a timeline node's closeness to the query
REFINE = 2  # timeline nodes refined one level down (the closest to the query), room permitting
_STAMP = re.compile(r"^\[[^\]\n]{1,40}\] ", re.M)


@cache
def _heading_tokens(name: str) -> int:
    """Tokens a section's heading adds (its line and the blank line before it)."""
    return count_tokens(HEADINGS[name] + "\n") + 1


def template_fields(template: str, allowed: tuple[str, ...], name: str) -> None:
    """Raise InvalidRequestError naming `name` unless every {field} of `template` is in `allowed`."""
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError as exc:
        raise InvalidRequestError(f"{name} is not a valid template: {exc}", name) from exc
    unknown = sorted({f for f in fields if f not in allowed})
    if unknown:
        raise InvalidRequestError(
            f"{name} has unknown fields {', '.join('{' + f + '}' for f in unknown)}; allowed: "
            + ", ".join("{" + f + "}" for f in allowed),
            name,
        )


def l1_span(node: MemoryNode, fan_out: int) -> tuple[int, int]:
    """The L1 positions [first, last + 1) under `node` (the tree is regular: FAN_OUT children per summary)."""
    width = fan_out ** (node.level - 1)
    return node.position * width, (node.position + 1) * width


@dataclass
class _Spans:
    """The L1 spans already spent, per source."""

    taken: dict[str, list[tuple[int, int]]] = field(default_factory=dict)

    def free(self, source: str, span: tuple[int, int]) -> bool:
        return all(span[1] <= lo or span[0] >= hi for lo, hi in self.taken.get(source, []))

    def take(self, source: str, span: tuple[int, int]) -> None:
        self.taken.setdefault(source, []).append(span)


class _Section:
    """Items of one section as they are admitted against its budget (heading cost included)."""

    def __init__(self, name: SectionName, budget: int) -> None:
        self.name, self.budget, self.used = name, budget, 0
        self.items: list[ContextItem] = []
        self.lines: list[str] = []
        self.left_out: list[LeftOut] = []
        self._heading = _heading_tokens(name)

    def admit(self, item: ContextItem, line: str) -> bool:
        cost = item.tokens + (self._heading if not self.items else 0)
        if self.used + cost > self.budget:
            self.left_out.append(
                LeftOut(
                    id=item.id,
                    section=self.name,
                    tokens=item.tokens,  # type: ignore[arg-type]
                    reason="no room in the budget",
                )
            )
            return False
        self.used += cost
        self.items.append(item)
        self.lines.append(line)
        return True


class ContextAssembler:
    """assemble: the token-budgeted context block.

    settings: CONTEXT_MAX_TOKENS, CONTEXT_MIN_SCORE, MAX_TOP_K, RETRIEVAL_MODE, FAN_OUT. embedder: the query's
    embedding. reader: the relevant memories (the read path). core: the core section. visits: counts each
    chunk and summary the block includes.
    """

    def __init__(self, settings: Settings, storage: Storage, embedder: Embedder, reader: Reader,
                 core: CoreMemory, visits: Visits) -> None:
        self.settings = settings
        self.storage = storage
        self.embedder = embedder
        self.reader = reader
        self.core = core
        self.visits = visits

    def assemble(self, ns: str, req: ContextRequest) -> ContextResponse:
        """Assemble the block (see the module doc). Raises InvalidRequestError (`budget_tokens`, `template`,
        `memory_template`) and NotFoundError (`conversation_id`, also another namespace's) before reading more."""
        res = self._assemble(ns, req)
        self.visits.record(ns, [i.id for sec in res.sections for i in sec.items if i.kind in ("chunk", "summary")])
        return res

    def _assemble(self, ns: str, req: ContextRequest) -> ContextResponse:
        s = self.settings
        budget = DEFAULT_BUDGET if req.budget_tokens is None else req.budget_tokens
        if req.budget_tokens is None:
            budget = min(budget, s.context_max_tokens)
        if not 0 < budget <= s.context_max_tokens:
            raise InvalidRequestError(
                f"budget_tokens must be between 1 and {s.context_max_tokens} (CONTEXT_MAX_TOKENS)", "budget_tokens"
            )
        template = req.template if req.template is not None else DEFAULT_CONTEXT_TEMPLATE
        memory_template = req.memory_template if req.memory_template is not None else DEFAULT_MEMORY_TEMPLATE
        template_fields(template, CONTEXT_FIELDS, "template")
        template_fields(memory_template, MEMORY_FIELDS, "memory_template")
        cid = req.conversation_id
        tail: list[StoredMessage] = []
        if cid is not None:
            src = self.storage.get_source(ns, cid)
            if src is None or src.source_type != "conversation":
                raise NotFoundError(f"no conversation {cid!r}", "conversation_id")
            tail = self.storage.messages(ns, cid, max(0, src.n_tokens - budget))
        now = utc(req.now) or datetime.now(UTC)
        query = req.query or (tail[-1].content if tail else None)
        vector = self.embedder.embed([query])[0] if query and (req.relevant or req.timeline) else None

        def render(item: ContextItem) -> str:
            values = {
                "time_ago": time_ago(item.end_time, now),
                "speaker": item.speaker or "",
                "date": _date(item),
                "text": _cut(item.text, req.max_memory_chars),
                "level": str(item.level),
            }
            if item.start_time is None and item.end_time is None and req.memory_template is None:
                return UNDATED_MEMORY_TEMPLATE.format_map(values)  # not "[undated, at an unknown time]"
            return memory_template.format_map(values)

        frame = template.format_map(
            {
                "user_name": req.user_name,
                "assistant_name": req.assistant_name,
                "memories": "",
                "core": "",
                "recent": "",
                "relevant": "",
                "timeline": "",
            }
        )
        room = budget - count_tokens(frame)
        enabled = {
            "core": req.core,
            "recent": req.recent and bool(tail),
            "relevant": req.relevant and vector is not None,
            "timeline": req.timeline,
        }
        spans = _Spans()
        shown: set[str] = set()  # message ids of the recent turns
        sections: list[_Section] = []
        carry = 0
        for name, share in SHARES.items():
            last = name == "timeline"
            sec = _Section(name, max(0, room - sum(x.used for x in sections)) if last else int(room * share) + carry)
            if enabled[name]:
                if name == "core":
                    self._fill_core(ns, cid, sec)
                elif name == "recent":
                    self._fill_recent(tail, sec, render, shown)
                elif name == "relevant":
                    assert query is not None and vector is not None  # enabled only then
                    self._fill_relevant(ns, req, query, vector, sec, render, shown, spans)
                else:
                    self._fill_timeline(ns, cid, query, vector, sec, render, spans, shown)
            carry = sec.budget - sec.used
            sections.append(sec)

        def block() -> str:
            parts: dict[str, str] = {x.name: "\n".join(x.lines) for x in sections}
            memories = "\n\n".join(f"{HEADINGS[x.name]}\n{parts[x.name]}" for x in sections if x.lines)
            return template.format_map(
                {"user_name": req.user_name, "assistant_name": req.assistant_name, "memories": memories, **parts}
            )

        text = block()
        used = count_tokens(text)
        while used > budget:  # token merges at the joins can cost a token or two more than the parts: drop the last
            sec = next(x for x in reversed(sections) if x.items)
            dropped = sec.items.pop()
            sec.lines.pop()
            sec.left_out.append(
                LeftOut(
                    id=dropped.id,
                    section=sec.name,
                    tokens=dropped.tokens,  # type: ignore[arg-type]
                    reason="no room in the budget",
                )
            )
            text = block()
            used = count_tokens(text)
        return ContextResponse(
            context=text,
            tokens_used=used,
            budget_tokens=budget,
            query=query,
            sections=[
                ContextSection(
                    name=x.name,
                    budget_tokens=x.budget,
                    tokens_used=x.used,  # type: ignore[arg-type]
                    items=x.items,
                    left_out=len(x.left_out),
                )
                for x in sections
            ],
            left_out=[lo for x in sections for lo in x.left_out][:MAX_LEFT_OUT],
        )

    # ------------------------------------------------------------------ sections
    def _fill_core(self, ns: str, cid: str | None, sec: _Section) -> None:
        for e in self.core.entries(ns, cid):
            line = f"- {e.key}: {e.value}"
            item = ContextItem(
                id=e.key,
                kind="core",
                level=0,
                text=f"{e.key}: {e.value}",
                source_id=e.conversation_id,
                start_time=e.updated_at,
                end_time=e.updated_at,
                why=f"core memory (importance {e.importance})",
                tokens=count_tokens(line + "\n"),
            )
            sec.admit(item, line)

    def _fill_recent(self, tail: list[StoredMessage], sec: _Section, render, shown: set[str]) -> None:  # type: ignore[no-untyped-def]
        kept: list[tuple[ContextItem, str]] = []
        for m in reversed(tail):  # newest first
            text = f"{m.speaker}: {' '.join(m.content.split())}"
            item = ContextItem(
                id=m.id,
                kind="message",
                level=0,
                text=text,
                speaker=m.speaker,
                source_id=m.source_id,
                start_time=m.created_at,
                end_time=m.created_at,
                why="recent turn",
                tokens=0,
            )
            line = render(item)
            item.tokens = count_tokens(line + "\n")
            if not sec.admit(item, line):
                break
            kept.append((item, line))
            shown.add(m.id)
        kept.reverse()  # shown oldest first
        sec.items, sec.lines = [k[0] for k in kept], [k[1] for k in kept]

    def _node_item(self, n: MemoryNode, why: str, score: float | None, render) -> tuple[ContextItem, str]:  # type: ignore[no-untyped-def]
        text = _STAMP.sub("", n.text.strip()).replace("\n", "\n  ")
        item = ContextItem(
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
        line = render(item)
        item.tokens = count_tokens(line + "\n")
        return item, line

    def _fill_relevant(
        self,
        ns: str,
        req: ContextRequest,
        query: str,
        vector: np.ndarray,
        sec: _Section,  # type: ignore[no-untyped-def]
        render,
        shown: set[str],
        spans: _Spans,
    ) -> None:
        s = self.settings
        floor = s.context_min_score if req.min_score is None else req.min_score
        flt = (
            None
            if req.all_conversations or req.conversation_id is None
            else QueryFilter(conversation_id=req.conversation_id)
        )
        top_k = min(s.max_top_k, max(10, sec.budget // 60))
        hits = self.reader.search(ns, query, vector, top_k, flt, req.mode)
        fan = s.fan_out
        for n, score in hits:
            if score < floor:
                break
            if n.message_ids and set(n.message_ids) <= shown:
                continue  # all of it is in the recent turns already
            group: list[tuple[MemoryNode, str, float | None]] = [
                (n, f"relevant to the query (score {score:.3f})", score)]
            if req.neighbours and n.level == 1:
                before, after = self.reader.neighbours(ns, n, req.neighbours, flt)
                group = (
                    [(b, f"neighbour of {n.id}", None) for b in before]
                    + group
                    + [(a, f"neighbour of {n.id}", None) for a in after]
                )
            for node, why, sc in group:
                span = l1_span(node, fan)
                if not spans.free(node.source_id, span) or (node.message_ids and set(node.message_ids) <= shown):
                    continue
                item, line = self._node_item(node, why, sc, render)
                if sec.admit(item, line):
                    spans.take(node.source_id, span)
                elif node is n:
                    break  # the hit itself did not fit: skip its neighbours
            if sec.budget - sec.used < 20:
                break

    def _fill_timeline(
        self,
        ns: str,
        cid: str | None,
        query: str | None,
        vector: np.ndarray | None,
        sec: _Section,  # type: ignore[no-untyped-def]
        render,
        spans: _Spans,
        shown: set[str],
    ) -> None:
        fan = self.settings.fan_out

        def covered(n: MemoryNode) -> bool:  # a chunk all of whose messages are among the recent turns shown
            return n.level == 1 and bool(n.message_ids) and set(n.message_ids) <= shown

        if cid is not None:
            todo = self.storage.roots(ns, cid, MAX_ROOTS)
        else:  # namespace-wide: the summaries closest to the query (or none without one)
            if vector is None:
                return
            todo = [n for n, _ in self.storage.search_vector(ns, vector, 20, QueryFilter(min_level=2))]
        candidates: list[MemoryNode] = []
        while todo:  # the highest nodes whose span is still free, splitting those that hold something spent
            n = todo.pop()
            if spans.free(n.source_id, l1_span(n, fan)) and not covered(n):
                candidates.append(n)
            elif n.level > 1 and n.children:
                todo.extend(self.storage.get_nodes(ns, n.children))
        if not candidates:
            return
        cos = self._closeness(ns, candidates, vector, query)
        by_score = sorted(candidates, key=lambda n: (-cos[n.id], -n.level, n.position))
        # refine the closest summaries one level down where the room allows it
        refined: dict[str, list[MemoryNode]] = {}
        room = sec.budget - count_tokens(HEADINGS["timeline"])
        base = sum(n.token_count + 12 for n in by_score)
        for n in by_score[:REFINE] if vector is not None else []:
            if n.level < 2 or not n.children:
                continue
            kids = self.storage.get_nodes(ns, n.children)
            extra = sum(k.token_count + 12 for k in kids) - n.token_count - 12
            if base + extra <= room:
                refined[n.id] = kids
                base += extra
        chosen: list[tuple[MemoryNode, float, str]] = []
        for n in by_score:
            if n.id in refined:
                kids = refined[n.id]
                kc = self._closeness(ns, kids, vector, query)
                chosen += [
                    (k, kc[k.id], f"refined from {n.id}, closest part of the timeline to the query") for k in kids
                ]
            else:
                chosen.append(
                    (
                        n,
                        cos[n.id],
                        "summarises a period not otherwise included"
                        if n.level > 1
                        else "a part of the timeline not otherwise included",
                    )
                )
        # admit by closeness, render in time order
        admitted: list[tuple[MemoryNode, ContextItem, str]] = []
        for n, c, why in sorted(chosen, key=lambda x: -x[1]):
            if n.token_count > sec.budget - sec.used:  # cannot fit: say so without rendering it
                sec.left_out.append(LeftOut(id=n.id, section="timeline", tokens=n.token_count,
                                            reason="no room in the budget"))
                continue
            item, line = self._node_item(n, why, c if vector is not None else None, render)
            if sec.admit(item, line):
                spans.take(n.source_id, l1_span(n, fan))
                admitted.append((n, item, line))
        admitted.sort(
            key=lambda x: (x[0].source_id, x[0].start_time or datetime.min.replace(tzinfo=UTC), l1_span(x[0], fan)[0])
        )
        sec.items, sec.lines = [a[1] for a in admitted], [a[2] for a in admitted]

    def _closeness(self, ns: str, nodes: list[MemoryNode], vector: np.ndarray | None,
                   query: str | None) -> dict[str, float]:
        """How close each node is to the query, in [0, 1]: `(1 - LEXICAL) * max(cosine, 0) + LEXICAL * the share of
        the query's words the node holds` (words matter on LoCoMo, see bench/RESULTS.md); without a query,
        recency decides (newest first)."""
        if vector is None or not query:
            return {n.id: (n.end_time.timestamp() if n.end_time else 0.0) * 1e-12 for n in nodes}
        q = np.asarray(vector, dtype=np.float32)
        vecs = self.storage.get_vectors(ns, [n.id for n in nodes])
        terms = set(text_terms(query))
        out = {}
        for n in nodes:
            words = set(text_terms(n.text)) if terms else set()
            lexical = len(terms & words) / len(terms) if terms else 0.0
            cosine = max(float(vecs[n.id] @ q), 0.0) if n.id in vecs else 0.0
            out[n.id] = (1 - LEXICAL) * cosine + LEXICAL * lexical
        return out


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _date(item: ContextItem) -> str:
    start, end = item.start_time, item.end_time
    if start is None and end is None:
        return "undated"
    a, b = (start or end), (end or start)
    if a.date() == b.date():  # type: ignore[union-attr]
        return f"{a:%Y-%m-%d}"
    return f"{a:%Y-%m-%d} to {b:%Y-%m-%d}"
