"""`pyramind upgrade` (datastore/portability/upgrade.py): a store written before messages kept their sentences is
rebuilt on them, nothing lost."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from datastore.factory import open_memory
from datastore.portability.upgrade import upgrade
from models.api import RememberRequest
from models.memory import MemoryNode
from services.embedding import LocalEmbedder
from services.summarising import ExtractiveSummariser
from tests.support.invariants import check_lines, check_tree
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


def test_summaries_written_before_they_kept_their_sentences_still_roll_up(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    """A store written before migration 013: its summaries name no picked sentences. The summaries over them
    are made of the sentences under them (datastore/write/spans.py), picked by id and rendered as a chunk is."""
    settings = make_settings(tmp_path, chunk_size=64, chunk_overlap=8, fan_out=2, max_level=4)
    memory = open_memory(settings, embedder, ExtractiveSummariser())
    said = conversation(("Alice", "Bob"), 80)
    memory.writer.remember("ns", RememberRequest(conversation_id="c1", messages=said[:20]))
    memory.close()
    with sqlite3.connect(settings.local_db_path) as db:
        assert db.execute("SELECT COUNT(*) FROM nodes WHERE level = 2").fetchone()[0] >= 2
        db.execute("ALTER TABLE nodes DROP COLUMN sentence_ids")
        db.execute("DELETE FROM migrations WHERE name = '013_summary_sentences'")

    memory = open_memory(settings, embedder, ExtractiveSummariser())
    old = {n.id: n for n in memory.storage.source_nodes("ns", "c1") if n.level >= 2}
    assert old and all(not n.sentence_ids for n in old.values())
    memory.writer.remember("ns", RememberRequest(conversation_id="c1", messages=said[20:]))
    nodes = memory.storage.source_nodes("ns", "c1")
    by_id = {n.id: n for n in nodes}
    over_old = [n for n in nodes if n.id not in old and any(c in old for c in n.children)]
    assert over_old, "no summary was made over the old ones"
    messages = {m.id: m for m in memory.storage.messages("ns", "c1")}
    for n in over_old:
        assert n.sentence_ids and n.text.startswith("[2024-01-01 ")
        under = {m for c in n.children for m in _messages_under(by_id, by_id[c])}
        assert {sid.rsplit(":", 1)[0] for sid in n.sentence_ids} <= under
        for sid in n.sentence_ids:  # each picked sentence is shown whole
            mid, index = sid.rsplit(":", 1)
            span = messages[mid].sentences[int(index)]
            assert messages[mid].content[span.start : span.end] in n.text
    s = settings
    check_tree(nodes, s.chunk_size, s.chunk_overlap, s.fan_out, s.max_level, written_before=set(old))
    memory.close()


def _messages_under(by_id: dict[str, MemoryNode], node: MemoryNode) -> set[str]:
    if node.level == 1:
        return set(node.message_ids)
    return {m for c in node.children for m in _messages_under(by_id, by_id[c])}


def test_a_store_whose_lines_named_their_chunk_takes_them_out_of_the_tree_on_open(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    settings = make_settings(tmp_path)
    memory = open_memory(settings, embedder, ExtractiveSummariser())
    said = conversation(("Alice", "Bob"), 40)
    memory.writer.remember("ns", RememberRequest(conversation_id="c1", messages=said[:30]))
    memory.close()
    # what a store written before lines left the tree holds: each line names the first chunk holding its message,
    # and the index of unparented nodes is over every node
    with sqlite3.connect(settings.local_db_path) as db:
        chunks = db.execute("SELECT id, message_ids FROM nodes WHERE level = 1 ORDER BY position").fetchall()
        for line_id, mids in db.execute("SELECT id, message_ids FROM nodes WHERE level = 0").fetchall():
            holder = next(c for c, held in chunks if json.loads(mids)[0] in json.loads(held))
            db.execute("UPDATE nodes SET parent_id = ? WHERE id = ?", (holder, line_id))
        db.execute("DROP INDEX nodes_unparented")
        db.execute("CREATE INDEX nodes_unparented ON nodes (namespace, source_id) WHERE parent_id IS NULL")
        db.execute("DELETE FROM migrations WHERE name = '012_lines_outside_the_tree'")
        assert db.execute("SELECT COUNT(*) FROM nodes WHERE level = 0 AND parent_id IS NOT NULL").fetchone()[0] > 0

    memory = open_memory(settings, embedder, ExtractiveSummariser())
    memory.writer.remember("ns", RememberRequest(conversation_id="c1", messages=said[30:]))  # the frontier reads on
    nodes = memory.storage.source_nodes("ns", "c1")
    check_tree(nodes, settings.chunk_size, settings.chunk_overlap, settings.fan_out, settings.max_level)
    assert len(check_lines(nodes)) > 30
    memory.close()
    with sqlite3.connect(settings.local_db_path) as db:
        assert db.execute("SELECT COUNT(*) FROM nodes WHERE level = 0 AND parent_id IS NOT NULL").fetchone()[0] == 0
        (index,) = db.execute("SELECT sql FROM sqlite_master WHERE name = 'nodes_unparented'").fetchone()
        assert "level >= 1" in index
