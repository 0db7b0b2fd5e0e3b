"""The DataStore: one class that owns Pyramind's pipeline; providers fill in small storage hooks.

remember: validate -> render lines -> chunk -> embed -> roll up (summarise, embed) -> write atomically.
query:    embed every query in one batch -> search (any level, filters) -> answer.
delete:   forget messages, then rebuild what was derived from them, so no level keeps a forgotten text.

The pipeline lives in one room per concern, composed here: `hooks.py` (the records and the provider hooks),
`remember.py`, `forget.py` (delete and rebuild) and `read.py` (query, expand). Provider hooks are synchronous;
the async API below runs each call in a worker thread, so nothing blocks the event loop.
"""

from __future__ import annotations

import asyncio

from pyramind.datastore.context import ContextAssembly
from pyramind.datastore.forget import Forgetting
from pyramind.datastore.forgetting import ForgettingPolicy
from pyramind.datastore.forks import Forking
from pyramind.datastore.hooks import DEFAULT_NAMESPACE, Extended, SourceRow, StoreBase, WriteBatch
from pyramind.datastore.indexing import Indexing
from pyramind.datastore.listing import Listing
from pyramind.datastore.read import to_result
from pyramind.datastore.remember import Remembering
from pyramind.datastore.sessions import SessionListing
from pyramind.datastore.shared import SharedReading
from pyramind.datastore.stats import Describing
from pyramind.models.api import (
    DeleteRequest,
    DeleteResponse,
    Document,
    ExpandResponse,
    Query,
    QueryResponse,
    RememberRequest,
    RememberResponse,
    UpsertResponse,
)
from pyramind.models.find import FindRequest, FindResponse, StatsResponse
from pyramind.services.errors import EmbeddingMismatchError

__all__ = ["DEFAULT_NAMESPACE", "DataStore", "Extended", "SourceRow", "StoreBase", "WriteBatch", "to_result"]


class DataStore(SessionListing, SharedReading, Forking, ForgettingPolicy, Remembering, Indexing, Forgetting,
                ContextAssembly, Describing, Listing):
    """Pyramind's storage and pipeline. Construct with settings, an embedder and a summariser; call `open()`."""

    def open(self) -> DataStore:
        """Open the provider and check the embedding model; raises EmbeddingMismatchError, StoreError."""
        self._open()
        model, dimension = self.embedder.model_name, self.embedder.dimension
        recorded = self._record_embedding(model, dimension)
        if recorded != (model, dimension):
            self.close()
            raise EmbeddingMismatchError(
                f"the {self.name} store ({self.location}) holds {recorded[0]} vectors of dimension {recorded[1]}, "
                f"but the embedder is {model} ({dimension}); use another store or the same embedder"
            )
        return self

    @property
    def location(self) -> str:
        """Where the store lives, for messages (a file, a database, an index); never a secret."""
        return self.name
    # ------------------------------------------------------------------ async API (what the server calls)
    async def remember(self, ns: str, req: RememberRequest) -> RememberResponse:
        return await asyncio.to_thread(self.remember_sync, ns, req)

    async def upsert(self, ns: str, documents: list[Document]) -> UpsertResponse:
        return await asyncio.to_thread(self.upsert_sync, ns, documents)

    async def query(self, ns: str, queries: list[Query]) -> QueryResponse:
        return await asyncio.to_thread(self.query_sync, ns, queries)

    async def delete(self, ns: str, req: DeleteRequest) -> DeleteResponse:
        return await asyncio.to_thread(self.delete_sync, ns, req)

    async def expand(self, ns: str, node_id: str) -> ExpandResponse:
        return await asyncio.to_thread(self.expand_sync, ns, node_id)

    async def find(self, ns: str, req: FindRequest) -> FindResponse:
        return await asyncio.to_thread(self.find_sync, ns, req)

    async def describe(self, ns: str, conversation_id: str | None = None) -> StatsResponse:
        return await asyncio.to_thread(self.describe_sync, ns, conversation_id)
