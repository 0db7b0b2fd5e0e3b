"""PostgreSQL-only behaviour, on the real PostgreSQL 16 + pgvector started by conftest.py."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from datastore.factory import open_memory
from datastore.memory import Memory
from datastore.providers.postgres.store import MIGRATIONS
from loopback.servers import free_port
from models.api import RememberRequest
from services.embedding import LocalEmbedder
from services.errors import ConflictError, StoreError
from services.summarising import ExtractiveSummariser
from tests.support.invariants import check_tree
from tests.support.settings import make_settings
from tests.support.stores import text_search
from tests.support.synthetic import conversation

pg_only = pytest.mark.parametrize("provider_settings", ["postgres"], indirect=True)


@pg_only
def test_migrations_are_named_recorded_and_run_once(memory: Memory, open_store: Callable[..., Memory]) -> None:
    open_store()  # a second open finds everything applied
    url = memory.settings.postgres_url.get_secret_value()  # type: ignore[union-attr]
    with psycopg.connect(url) as conn:
        names = [r[0] for r in conn.execute("SELECT name FROM pyramind_migrations ORDER BY name")]
        assert names == sorted(name for name, _ in MIGRATIONS)
        indexes = {
            r[0]: r[1]
            for r in conn.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'pyramind_nodes'")
        }
        dim = conn.execute(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = 'pyramind_nodes'::regclass AND attname = 'embedding'"
        ).fetchone()
    # queries rank in memory above the store: no index that only search used is kept up by every write
    assert "pyramind_nodes_hnsw" not in indexes and "pyramind_nodes_tsv" not in indexes
    assert "pyramind_nodes_by_source" in indexes and dim == ("vector(384)",)


@pg_only
def test_full_text_search_and_stats(memory: Memory, ns: str) -> None:
    memory.writer.remember(ns, RememberRequest(conversation_id="c", messages=conversation(("Alice", "Bob"), 40)))
    hits = text_search(memory).search(ns, "cardamom for the curries", 5)
    assert hits and all("cardamom" in n.text or "curry" in n.text for n, _ in hits)
    assert [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)
    assert (
        text_search(memory).search(ns, "!!!", 5) == []
        and text_search(memory).search(f"{ns}-other", "cardamom", 5) == []
    )
    stats = memory.storage.counts(ns)
    assert stats["sources"] == 1 and stats["messages"] == 40 and stats["L1"] >= 5 and stats["L2"] >= 1


@pg_only
def test_two_stores_writing_one_conversation_never_summarise_the_same_children(
    open_store: Callable[..., Memory], ns: str
) -> None:
    """Two store objects (two pools, no shared in-process lock: like two server processes) append to the same
    conversation at once; the advisory lock and the version check keep one valid tree with every message."""
    a, b = open_store(), open_store()
    messages = conversation(("Alice", "Bob"), 80)
    errors: list[BaseException] = []

    def writer(memory: Memory, part: list) -> None:
        try:
            for i in range(0, len(part), 8):
                for _ in range(20):  # a writer that keeps losing gets ConflictError (a 409): its client retries
                    try:
                        memory.writer.remember(ns, RememberRequest(conversation_id="c", messages=part[i : i + 8]))
                        break
                    except ConflictError:
                        continue
                else:
                    raise AssertionError("a writer lost 20 rounds in a row")
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [
        threading.Thread(target=writer, args=(a, messages[:40])),
        threading.Thread(target=writer, args=(b, messages[40:])),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors
    s = a.settings
    nodes = a.storage.source_nodes(ns, "c")
    check_tree(nodes, s.chunk_size, s.chunk_overlap, s.fan_out, s.max_level)
    assert {m.id for m in a.storage.messages(ns, "c", -1)} == {m.id for m in messages}
    assert {m for n in nodes if n.level == 1 for m in n.message_ids} == {m.id for m in messages}


def test_an_unreachable_or_missing_database_is_a_clear_store_error(tmp_path: Path, embedder: LocalEmbedder) -> None:
    with pytest.raises(StoreError, match="POSTGRES_URL"):
        open_memory(make_settings(tmp_path, datastore="postgres"), embedder, ExtractiveSummariser())
    url = f"postgresql://postgres@127.0.0.1:{free_port()}/nothing"  # nobody listens there
    with pytest.raises(StoreError, match="cannot open the postgres store"):
        open_memory(make_settings(tmp_path, datastore="postgres", postgres_url=url), embedder, ExtractiveSummariser())
