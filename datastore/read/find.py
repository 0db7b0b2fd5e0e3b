"""Finding: full-text and regex search over the stored messages (`POST /find`, the MCP `find` tool).

Patterns run in RE2 (google-re2), whose matching time is linear in the text, so no pattern can backtrack
catastrophically; RE2's memory for a compiled pattern is capped, and the scan stops at FIND_TIME_LIMIT seconds
(the answer then says `complete: false`). Messages come from `Storage.scan_messages`, which streams a
namespace's messages in (source id, seq) order with the filters applied.
"""

from __future__ import annotations

import time

import re2

from datastore.storage import Storage
from models.api import DeleteFilter, unknown_conversation
from models.find import MARK_CLOSE, MARK_OPEN, FindMatch, FindRequest, FindResponse
from models.memory import MemoryNode, StoredMessage
from models.settings import Settings
from services.errors import InvalidRequestError

RE2_MAX_MEM = 8 << 20  # bytes RE2 may use for one compiled pattern
MAX_SPANS = 50  # matches marked per message


def compile_pattern(pattern: str, regex: bool, case_sensitive: bool) -> re2._Regexp:
    """The RE2 program of a find pattern; raises InvalidRequestError naming `pattern` when it does not compile."""
    options = re2.Options()
    options.max_mem = RE2_MAX_MEM
    options.literal = not regex
    options.case_sensitive = case_sensitive
    options.log_errors = False
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else "does not compile"
        reason = reason.decode("utf-8", "replace") if isinstance(reason, bytes) else str(reason)
        raise InvalidRequestError(f"invalid pattern: {reason[:200]}", "pattern") from exc


def message_filter(req: FindRequest) -> DeleteFilter | None:
    """The request's filters as the message filter the provider hooks take (None when none is given)."""
    if all(v is None for v in (req.conversation_id, req.speaker, req.start_date, req.end_date)):
        return None
    return DeleteFilter.model_construct(
        conversation_id=req.conversation_id,
        document_id=None,
        speaker=req.speaker,
        start_date=req.start_date,
        end_date=req.end_date,
    )


def mark(text: str, spans: list[list[int]]) -> str:
    """`text` with each [start, end) span wrapped in ** marks."""
    out, at = [], 0
    for start, end in spans:
        out += [text[at:start], MARK_OPEN, text[start:end], MARK_CLOSE]
        at = end
    out.append(text[at:])
    return "".join(out)


class Finder:
    """find: regex or literal search over the stored messages. settings: FIND_MAX_LIMIT, FIND_TIME_LIMIT."""

    def __init__(self, settings: Settings, storage: Storage) -> None:
        self.settings = settings
        self.storage = storage

    def find(self, ns: str, req: FindRequest) -> FindResponse:
        """Messages of the namespace matching `req.pattern` and its filters, each with its L1 chunk.

        Raises InvalidRequestError naming `pattern` (does not compile) or `limit` (over FIND_MAX_LIMIT),
        A `conversation_id` the namespace does not hold finds nothing, with an `unknown_conversation` warning.
        """
        s = self.settings
        if req.limit > s.find_max_limit:
            raise InvalidRequestError(f"limit must be at most {s.find_max_limit} (FIND_MAX_LIMIT)", "limit")
        if req.conversation_id is not None:  # a mistyped or not-yet-written id: nothing, and a warning saying so
            src = self.storage.get_source(ns, req.conversation_id)
            if src is None or src.source_type != "conversation":
                warning = unknown_conversation(req.conversation_id, "conversation_id", f"namespace {ns!r}")
                return FindResponse(matches=[], scanned=0, complete=True, warnings=[warning])
        program = compile_pattern(req.pattern, req.regex, req.case_sensitive)
        deadline = time.monotonic() + s.find_time_limit
        found: list[tuple[StoredMessage, list[list[int]]]] = []
        scanned, complete = 0, True
        for m in self.storage.scan_messages(ns, message_filter(req)):
            if req.session_id is not None and m.session_id != req.session_id:
                continue  # the session filter is the same for every provider: applied here, over the scan
            spans = _spans(program, m.content, deadline)
            if spans is None:
                complete = False
                break
            scanned += 1
            if spans:
                found.append((m, spans))
                if len(found) >= req.limit:
                    break
        chunks = self._chunks_of(ns, [m for m, _ in found])
        matches = [
            FindMatch(
                message_id=m.id,
                source_type=m.source_type,
                conversation_id=m.source_id if m.source_type == "conversation" else None,
                document_id=m.source_id if m.source_type == "document" else None,
                speaker=m.speaker,
                created_at=m.created_at,
                text=mark(m.content, spans),
                spans=spans,
                chunk_id=_holder(chunks.get((m.source_id, m.id), []), program),
            )
            for m, spans in found
        ]
        return FindResponse(matches=matches, scanned=scanned, complete=complete)

    def _chunks_of(self, ns: str, messages: list[StoredMessage]) -> dict[tuple[str, str], list[MemoryNode]]:
        """(source id, message id) -> the L1 chunks holding the message, in order (one read per source)."""
        wanted: dict[str, set[str]] = {}
        for m in messages:
            wanted.setdefault(m.source_id, set()).add(m.id)
        out: dict[tuple[str, str], list[MemoryNode]] = {}
        for source_id, ids in wanted.items():
            for node in self.storage.source_nodes(ns, source_id, level=1):
                for mid in ids.intersection(node.message_ids):
                    out.setdefault((source_id, mid), []).append(node)
        return out


def _spans(program: re2._Regexp, text: str, deadline: float) -> list[list[int]] | None:
    """[start, end) of the first MAX_SPANS non-empty matches; None when the deadline passes first (checked before
    every match, so one step costs at most one RE2 search: linear in the text, at most MAX_PATTERN_CHARS wide)."""
    out: list[list[int]] = []
    if time.monotonic() > deadline:
        return None
    for hit in program.finditer(text):
        if time.monotonic() > deadline:
            return None
        if hit.end() > hit.start():
            out.append([hit.start(), hit.end()])
            if len(out) >= MAX_SPANS:
                break
    return out


def _holder(chunks: list[MemoryNode], program: re2._Regexp) -> str | None:
    """The first chunk whose text holds a match (a long message spans several chunks), else the first chunk."""
    if not chunks:
        return None
    chunks = sorted(chunks, key=lambda n: n.position)
    for node in chunks:
        if program.search(node.text):
            return node.id
    return chunks[0].id
