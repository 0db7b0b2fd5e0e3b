"""Core memory: short facts per namespace (or per conversation) that every context block starts with.

Entries live in the storage's core table (the optional `core` capability; without it, core memory is refused
with UnsupportedError and the context block shows none). Each scope (the namespace, or
one conversation) holds at most CORE_MAX_TOKENS tokens of `key: value` lines. A write that would exceed it moves
the least important, oldest entries out to long-term memory: each becomes a document (`core_document_id`),
chunked and summarised like any other, so `/query` and the context's relevant memories can still recall it.
Deleting a key removes the entry and its moved-out document. Expired entries (ttl) are hidden at once and purged
by the next write.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from urllib.parse import quote

from datastore.locks import SourceLocks
from datastore.storage import CoreTable, Storage
from datastore.write.delete import Deleter
from datastore.write.remember import Writer
from models.api import DeleteRequest, Document, DocumentMetadata
from models.core import CoreDeleteResponse, CoreEntry, CoreListResponse, CorePutRequest, CorePutResponse
from models.settings import Settings
from services.clock import Clock, system_clock
from services.errors import InvalidRequestError, NotFoundError, UnsupportedError
from services.tokens import count_tokens


def core_document_id(key: str, conversation_id: str | None = None) -> str:
    """Id of the long-term document a moved-out entry becomes: `core:<key>` or `core:<conversation>:<key>`
    (both parts percent-encoded, so the id is unambiguous)."""
    k = quote(key, safe="")
    return f"core:{quote(conversation_id, safe='')}:{k}" if conversation_id else f"core:{k}"


def core_line(key: str, value: str) -> str:
    """The line an entry is rendered as (and counted by): `key: value`."""
    return f"{key}: {value}"


def _live(entries: list[CoreEntry], now: datetime) -> list[CoreEntry]:
    return [e for e in entries if e.expires_at is None or e.expires_at > now]


def by_importance(entries: list[CoreEntry]) -> list[CoreEntry]:
    """Most important first, then most recently updated first."""
    return sorted(entries, key=lambda e: (-e.importance, -e.updated_at.timestamp(), e.key))


class CoreMemory:
    """put, list, delete, and `entries` (what the context block shows), over the storage's core table.

    settings: CORE_MAX_TOKENS. writer: stores a moved-out entry as a document. deleter: forgets a moved-out
    entry's document. locks: serialises writers of one scope.
    """

    def __init__(
        self,
        settings: Settings,
        storage: Storage,
        writer: Writer,
        deleter: Deleter,
        locks: SourceLocks,
        clock: Clock = system_clock,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.storage = storage
        self.table: CoreTable | None = storage.core
        self.writer = writer
        self.deleter = deleter
        self.locks = locks

    def _table(self) -> CoreTable:
        if self.table is None:
            raise UnsupportedError(f"core memory is not supported by the {self.storage.name} store")
        return self.table

    def put(self, ns: str, req: CorePutRequest) -> CorePutResponse:
        """Set `req.key` in its scope; move the least important, oldest other entries to long-term memory while
        the scope is over CORE_MAX_TOKENS. Raises InvalidRequestError (`value`) when the entry alone is over the
        budget (nothing changes), UnsupportedError on a provider without core memory."""
        budget = self.settings.core_max_tokens
        tokens = count_tokens(core_line(req.key, req.value))
        if tokens > budget:
            raise InvalidRequestError(
                f"the entry is {tokens} tokens, over the core memory budget of {budget} (CORE_MAX_TOKENS)", "value"
            )
        table = self._table()
        scope = req.conversation_id or ""
        with self.locks(ns, "\x00core:" + scope):
            now = self.clock()
            stored = table.entries(ns, [scope])
            expired = [e.key for e in stored if e.expires_at is not None and e.expires_at <= now]
            old = next((e for e in stored if e.key == req.key), None)
            entry = CoreEntry(
                key=req.key,
                value=req.value,
                importance=req.importance,
                conversation_id=req.conversation_id,
                created_at=old.created_at if old else now,
                updated_at=now,
                expires_at=now + timedelta(seconds=req.ttl_seconds) if req.ttl_seconds else None,
                tokens=tokens,
            )
            others = [e for e in _live(stored, now) if e.key != req.key]
            used = tokens + sum(e.tokens for e in others)
            moved: list[CoreEntry] = []
            for e in sorted(others, key=lambda e: (e.importance, e.updated_at.timestamp(), e.key)):
                if used <= budget:
                    break
                moved.append(e)
                used -= e.tokens
            if moved:  # archive first: if the core write then fails, nothing is lost (it is only in both places)
                self.writer.upsert(ns, [self._as_document(e) for e in moved])
            doc_id = core_document_id(req.key, req.conversation_id)
            if self.storage.get_source(ns, doc_id) is not None:  # it was moved out before: the entry replaces it
                self.deleter.delete(ns, DeleteRequest(ids=[doc_id]))
            table.write(ns, scope, entry, [*expired, *(e.key for e in moved)])
        return CorePutResponse(entry=entry, moved_out=moved, tokens_used=used, budget_tokens=budget)

    def list_entries(self, ns: str, conversation_id: str | None = None) -> CoreListResponse:
        """The scope's unexpired entries, most important first, and the tokens they take. Raises
        UnsupportedError on a storage without core memory."""
        entries = by_importance(_live(self._table().entries(ns, [conversation_id or ""]), self.clock()))
        return CoreListResponse(
            entries=entries, tokens_used=sum(e.tokens for e in entries), budget_tokens=self.settings.core_max_tokens
        )

    def delete(self, ns: str, key: str, conversation_id: str | None = None) -> CoreDeleteResponse:
        """Forget `key` of the scope everywhere: the core entry and its moved-out document (with its chunks and
        summaries). Raises NotFoundError (`key`) when neither exists, UnsupportedError without core memory."""
        table = self._table()
        scope = conversation_id or ""
        with self.locks(ns, "\x00core:" + scope):
            doc_id = core_document_id(key, conversation_id)
            had_doc = self.storage.get_source(ns, doc_id) is not None
            gone = table.write(ns, scope, None, [key])
            if had_doc:
                self.deleter.delete(ns, DeleteRequest(ids=[doc_id]))
        if not gone and not had_doc:
            raise NotFoundError(f"no core memory entry {key!r}", "key")
        return CoreDeleteResponse(deleted=True, deleted_documents=int(had_doc))

    def entries(self, ns: str, conversation_id: str | None = None) -> list[CoreEntry]:
        """What the context block shows: the namespace's and (when given) the conversation's unexpired entries,
        most important first. [] on a storage without core memory."""
        if self.table is None:
            return []
        scopes = [""] + ([conversation_id] if conversation_id else [])
        # both scopes in one read; the namespace's first, as ties of `by_importance` keep them
        stored = sorted(self.table.entries(ns, scopes), key=lambda e: scopes.index(e.conversation_id or ""))
        return by_importance(_live(stored, self.clock()))

    @staticmethod
    def _as_document(e: CoreEntry) -> Document:
        return Document(
            id=core_document_id(e.key, e.conversation_id),
            text=core_line(e.key, e.value),
            metadata=DocumentMetadata(source="core", source_id=e.key, author="core memory", created_at=e.updated_at),
        )
