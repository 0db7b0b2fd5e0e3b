"""`pyramind upgrade` (datastore/portability/upgrade.py): a store written before messages kept their sentences is
rebuilt on them, nothing lost."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from datastore.factory import open_memory
from datastore.portability.upgrade import upgrade
from models.api import RememberRequest
from services.embedding import LocalEmbedder
from services.summarising import ExtractiveSummariser
from tests.support.invariants import check_tree
from tests.support.settings import make_settings
from tests.support.synthetic import conversation


def test_a_store_without_sentences_is_rebuilt_on_them_and_loses_nothing(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    settings = make_settings(tmp_path)
    memory = open_memory(settings, embedder, ExtractiveSummariser())
    said = conversation(("Alice", "Bob"), 40)
    said[3].content = "From now on answer in French."
    memory.writer.remember("ns", RememberRequest(conversation_id="c1", messages=said))
    memory.writer.remember("ns", RememberRequest(conversation_id="c2", messages=conversation(("Carol", "Dan"), 8)))
    instructions = [i.text for i in memory.instructions.list("ns").instructions] if memory.instructions else []
    memory.close()
    # what a store written before sentences holds: no sentences, chunks cut inside words, undated
    with sqlite3.connect(settings.local_db_path) as db:
        db.execute("UPDATE messages SET sentences = NULL WHERE source_id = 'c1'")
        db.execute("UPDATE nodes SET text = substr(text, 24) WHERE level = 1 AND source_id = 'c1'")

    memory = open_memory(settings, embedder, ExtractiveSummariser())
    old = memory.storage.source_nodes("ns", "c1", 1)
    assert all(not c.text.startswith("[") for c in old)
    report = upgrade(memory)
    assert (report.rebuilt, report.current, report.messages) == (1, 1, 40)
    messages = memory.storage.messages("ns", "c1")
    assert [m.id for m in messages] == [m.id for m in said] and all(m.sentences for m in messages)
    assert [m.content for m in messages] == [m.content for m in said]
    chunks = memory.storage.source_nodes("ns", "c1", 1)
    assert chunks and all(c.text.startswith("[2024-01-01 ") for c in chunks)
    nodes = memory.storage.source_nodes("ns", "c1")
    check_tree(nodes, settings.chunk_size, settings.chunk_overlap, settings.fan_out, settings.max_level)
    if memory.instructions:
        assert [i.text for i in memory.instructions.list("ns").instructions] == instructions
    assert upgrade(memory).rebuilt == 0  # once is enough
    memory.close()
