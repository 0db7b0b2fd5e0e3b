"""The provider contract for memory over a lifetime (sessions, pins and visits, forgetting, export): every
provider (local, postgres, pinecone) behaves the same through the Memory. Fixtures: tests/datastore/conftest.py.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import cast

import numpy as np
import pytest

from datastore.memory import Memory
from datastore.portability.dump import DumpError
from datastore.storage import Storage
from models.api import Message, Query, QueryFilter, RememberRequest
from models.core import CorePutRequest
from services.errors import InvalidRequestError, NotFoundError
from tests.support.stores import CountedStorage, mark_table
from tests.support.synthetic import conversation

T0 = datetime(2024, 1, 1, 9, 0, tzinfo=UTC)


def search(memory: Memory, ns: str, text: str, mode: str, top_k: int = 50, **flt: object) -> list:
    q = Query(query=text, top_k=top_k, filter=QueryFilter(**flt) if flt else None, mode=mode)  # type: ignore[arg-type]
    return memory.reader.query(ns, [q]).results[0].results


def three_sessions(memory: Memory, ns: str) -> None:
    """conv: 30 messages in an explicit session 'mon', 30 inferred a day later, 30 after another day."""
    memory.writer.remember(
        ns,
        RememberRequest(conversation_id="conv", session_id="mon", messages=conversation(("Ann", "Bob"), 30, start=T0)),
    )
    for day in (1, 2):
        memory.writer.remember(
            ns,
            RememberRequest(
                conversation_id="conv",
                messages=conversation(("Ann", "Bob"), 30, start=T0 + timedelta(days=day), first=30 * day),
            ),
        )


@pytest.mark.parametrize("mode", ["dense", "hybrid", "text", "tree"])
def test_sessions_are_stored_listed_and_filtered(memory: Memory, ns: str, mode: str) -> None:
    three_sessions(memory, ns)
    msgs = memory.storage.messages(ns, "conv", -1)
    day1 = "s-2024-01-02T09:30:00Z"
    assert [m.session_id for m in msgs[:30]] == ["mon"] * 30
    assert {m.session_id for m in msgs[30:60]} == {day1}
    nodes = memory.storage.source_nodes(ns, "conv")
    assert all(n.session_ids for n in nodes)
    assert all(len(n.session_ids) == 1 for n in nodes if n.level == 1)  # no chunk across a session boundary
    hits = search(memory, ns, "the garden and the compost heap", mode, session_id=day1)
    assert hits and all(day1 in h.session_ids for h in hits)
    assert all(h.session_id == h.session_ids[0] for h in hits)
    hits = search(memory, ns, "the garden and the compost heap", mode, session_id="no-such-session")
    assert hits == []

    sessions = memory.sessions.of_conversation(ns, "conv")
    assert [s.session_id for s in sessions] == ["mon", day1, "s-2024-01-03T10:00:00Z"]
    assert [s.message_count for s in sessions] == [30, 30, 30]
    assert sessions[0].first_message_id == "m-0" and sessions[0].last_message_id == "m-29"
    assert sessions[1].start_time == T0 + timedelta(days=1, minutes=30)
    by_id = {n.id: n for n in nodes}
    for s in sessions:
        assert s.summary_ids and all(s.session_id in by_id[i].session_ids for i in s.summary_ids)
    with pytest.raises(NotFoundError):
        memory.sessions.of_conversation(ns, "no-such-conversation")


def test_sessions_survive_a_delete_rebuild(memory: Memory, ns: str) -> None:
    three_sessions(memory, ns)
    from models.api import DeleteRequest

    memory.deleter.delete(ns, DeleteRequest(ids=["m-3"]))
    msgs = memory.storage.messages(ns, "conv", -1)
    assert msgs[0].session_id == "mon" and msgs[-1].session_id == "s-2024-01-03T10:00:00Z"
    assert all(n.session_ids for n in memory.storage.source_nodes(ns, "conv"))


# ---------------------------------------------------------------------- visits and pins
def test_visits_are_buffered_then_flushed(memory: Memory, ns: str) -> None:
    three_sessions(memory, ns)
    hits = search(memory, ns, "the garden and the compost heap", "dense", top_k=3)
    assert mark_table(memory).get(ns, [h.id for h in hits]) == {}  # a query writes nothing
    search(memory, ns, "the garden and the compost heap", "dense", top_k=3)
    assert memory.visits.flush() == 3
    marks = mark_table(memory).get(ns, [h.id for h in hits])
    assert {i: m.visit_count for i, m in marks.items()} == {h.id: 2 for h in hits}
    assert all(m.last_visited_at is not None and not m.pinned for m in marks.values())
    view = memory.reader.expand(ns, hits[0].id).node
    assert view.visit_count == 2 and view.last_visited_at is not None
    assert memory.visits.flush() == 0


def test_pin_protects_the_messages_under_the_node(memory: Memory, ns: str, other_ns: str) -> None:
    three_sessions(memory, ns)
    summary = next(n for n in memory.storage.source_nodes(ns, "conv") if n.level == 2)
    res = memory.visits.pin(ns, summary.id)
    leaves = [n for n in memory.reader.subtree(ns, summary.id) if n.level == 1]
    under = {m for n in leaves for m in n.message_ids}
    assert res.pinned and res.protected_message_ids == len(under)
    assert memory.visits.protected_messages(ns) == under
    assert memory.reader.expand(ns, summary.id).node.pinned
    with pytest.raises(NotFoundError):
        memory.visits.pin(other_ns, summary.id)  # another namespace's node
    assert memory.visits.protected_messages(other_ns) == set()
    memory.visits.pin(ns, summary.id, False)
    assert memory.visits.protected_messages(ns) == set() and not memory.reader.expand(ns, summary.id).node.pinned


@pytest.fixture
def other_ns(ns: str) -> str:
    return ns + "-other"


# ---------------------------------------------------------------------- forgetting policy
def test_forgetting_policy_keeps_pins_and_visited_and_leaves_no_trace(open_store, ns: str) -> None:
    memory = open_store(forget_max_nodes=8, forget_fraction=0.25)
    three_sessions(memory, ns)
    leaves = [n for n in memory.storage.source_nodes(ns, "conv") if n.level == 1]
    assert len(leaves) > 12
    summary = next(n for n in memory.storage.source_nodes(ns, "conv") if n.level == 2 and n.position == 1)
    memory.visits.pin(ns, summary.id)
    pinned_msgs = memory.visits.protected_messages(ns)
    visited = leaves[0]  # the oldest chunk, but visited: it goes after every unvisited one
    memory.visits.record(ns, [visited.id])
    memory.visits.flush()

    plan = memory.policy.run(ns, dry_run=True)
    assert plan.enabled and plan.l1_before == len(leaves) and plan.l1_after is None
    assert len(plan.forgotten) == 4 * math.ceil((len(leaves) - 8) / 4)  # steps of ceil(0.25 * chunks)
    assert all(not set(f.message_ids) & pinned_msgs for f in plan.forgotten)
    assert visited.id not in {f.node_id for f in plan.forgotten}
    ends = [f.end_time for f in plan.forgotten]
    assert ends == sorted(ends)  # never visited: oldest first
    assert [n.id for n in memory.storage.source_nodes(ns, "conv") if n.level == 1] == [n.id for n in leaves]

    done = memory.policy.run(ns, dry_run=False)
    assert done.l1_after is not None and done.l1_after <= 8 and done.deleted_messages > 0
    kept = {m.id for m in memory.storage.messages(ns, "conv", -1)}
    assert pinned_msgs <= kept and set(visited.message_ids) & kept
    gone = {m for f in done.forgotten for m in f.message_ids}
    assert gone and not gone & kept
    nodes = memory.storage.source_nodes(ns, "conv")
    for mid in gone:  # no chunk and no summary keeps a forgotten text
        note = f"(note {mid.split('-')[1]})"
        assert not any(note in n.text for n in nodes), mid
    assert all(not set(n.message_ids) & gone for n in nodes)
    # the rebuilt chunks holding the visited chunk's messages keep its visits
    holders = [n for n in nodes if n.level == 1 and set(n.message_ids) & set(visited.message_ids)]
    marks = mark_table(memory).get(ns, [n.id for n in holders])
    assert holders and all(marks[n.id].visit_count == 1 for n in holders)


def test_forgetting_by_age_and_off_by_default(open_store, ns: str) -> None:
    memory = open_store()
    three_sessions(memory, ns)
    off = memory.policy.run(ns, dry_run=False)
    assert not off.enabled and off.forgotten == [] and off.l1_after == off.l1_before
    memory = open_store(forget_after_days=1.5)
    res = memory.policy.run(ns, dry_run=False, now=T0 + timedelta(days=3, hours=2))
    assert {f.reason for f in res.forgotten} == {"age"}
    left = {m.id for m in memory.storage.messages(ns, "conv", -1)}
    assert not left & {f"m-{i}" for i in range(30)}  # day 0: older than 1.5 days
    assert {f"m-{i}" for i in range(60, 90)} <= left  # day 2: younger


# ---------------------------------------------------------------------- export and import
def snapshot(memory: Memory, ns: str) -> dict:
    """Everything a namespace holds, node by node, message by message (comparable across stores)."""
    out: dict = {"sources": {}, "marks": {}}
    for sid in memory.storage.list_sources(ns):
        row = memory.storage.get_source(ns, sid)
        assert row is not None
        out["sources"][sid] = (
            (row.source_type, row.version, row.n_messages, row.n_tokens, row.max_seq, row.metadata),
            [m.model_dump() for m in memory.storage.messages(ns, sid, -1)],
            [n.model_dump() for n in memory.storage.source_nodes(ns, sid)],
        )
    out["marks"] = mark_table(memory).get(ns, None)
    assert memory.storage.core is not None, f"the {memory.name} store keeps no core memory"
    core = memory.storage.core.entries(ns, None)
    out["core"] = sorted((e.conversation_id or "", e.key, e.value, e.importance, e.tokens) for e in core)
    out["instructions"] = [i.model_dump() for i in memory.instructions.list(ns, include_superseded=True).instructions]
    return out


@pytest.mark.parametrize("embeddings", [False, True])
def test_export_import_round_trip_is_exact(memory: Memory, ns: str, embeddings: bool) -> None:
    from datastore.portability.dump import export_lines, import_dump
    from models.api import Document

    three_sessions(memory, ns)
    memory.writer.upsert(ns, [Document(id="doc", text="The boiler manual. " * 200)])
    memory.writer.remember(
        ns,
        RememberRequest(
            conversation_id="rules",
            messages=[  # standing instructions
                Message(id="r1", speaker="Ann", content="From now on answer in French.", created_at=T0),
                Message(
                    id="r2",
                    speaker="Ann",
                    content="I prefer tabs. From now on answer in English.",
                    created_at=T0 + timedelta(hours=1),
                ),
            ],
        ),
    )
    assert memory.instructions.list(ns).active == 2
    memory.visits.record(ns, [memory.storage.source_nodes(ns, "conv")[0].id])
    memory.visits.flush()
    memory.visits.pin(ns, next(n.id for n in memory.storage.source_nodes(ns, "conv") if n.level == 2))
    # every kind of record: core memory of the namespace and of a conversation too
    memory.core.put(ns, CorePutRequest(key="name", value="Ann Lee", importance=80))
    memory.core.put(ns, CorePutRequest(key="goal", value="a greener garden", conversation_id="conv"))
    # the answer kept for a write sent with an Idempotency-Key: a retry after the import still gets it
    memory.idempotency.keep(ns, "key-1", "upsert", {"documents": [{"id": "doc"}]}, 200, '{"ids": ["doc"]}')
    lines = list(export_lines(memory, [ns], embeddings=embeddings))
    assert lines[0].startswith('{"type": "header"') and '"type": "end"' in lines[-1]
    assert sum('"type": "core_memory"' in line for line in lines) == 2
    assert sum('"type": "instruction"' in line for line in lines) == 3
    assert sum('"type": "idempotency"' in line for line in lines) == 1

    copy = ns + "-copy"
    report = import_dump(memory, lines, namespace=copy)
    assert report["sources"] == 3 and report["marks"] == 2 and report["core_memory"] == 2
    assert report["instructions"] == 3 and report["idempotency"] == 1
    assert snapshot(memory, copy) == snapshot(memory, ns)
    kept = memory.idempotency.replay(copy, "key-1", "upsert", {"documents": [{"id": "doc"}]})
    assert kept is not None and (kept.status, kept.response) == (200, '{"ids": ["doc"]}')
    a_rules, b_rules = (
        memory.instructions.active(ns),
        memory.instructions.active(copy),
    )  # vectors: the dump's or re-embedded
    assert [i for i, _ in a_rules] == [i for i, _ in b_rules]
    assert all(np.allclose(a, b, atol=1e-5) for (_, a), (_, b) in zip(a_rules, b_rules, strict=True))
    ids = [n.id for n in memory.storage.source_nodes(ns, "conv")]
    a, b = memory.storage.get_vectors(ns, ids), memory.storage.get_vectors(copy, ids)
    assert all(np.allclose(a[i], b[i], atol=1e-5) for i in ids)
    hits = search(memory, copy, "the garden and the compost heap", "hybrid", top_k=3)
    assert [h.id for h in hits] == [
        h.id for h in search(memory, ns, "the garden and the compost heap", "hybrid", top_k=3)
    ]
    with pytest.raises(DumpError, match="already holds"):
        import_dump(memory, lines, namespace=copy)  # nothing half-written over an existing copy


def test_a_cut_or_changed_dump_names_the_line_and_writes_nothing(memory: Memory, ns: str) -> None:
    from datastore.portability.dump import export_lines, import_dump

    three_sessions(memory, ns)
    lines = list(export_lines(memory, [ns]))
    target = ns + "-bad"
    tampered = list(lines)
    tampered[5] = tampered[5].replace("About", "Abort", 1)
    cases = {
        "cut": (lines[:-3] + [lines[-3][: len(lines[-3]) // 2]], f"line {len(lines) - 2}"),
        "no end": (lines[:-1], f"line {len(lines) - 1}"),
        "tampered": (tampered, "line 6"),
        "missing line": (lines[:7] + lines[8:], f"line {len(lines) - 1}"),
    }
    for name, (bad, where) in cases.items():
        with pytest.raises(DumpError) as err:
            import_dump(memory, bad, namespace=target)
        assert where in err.value.message, (name, err.value.message)
        assert memory.storage.list_sources(target) == [], name


# ---------------------------------------------------------------------- forks
def covered(memory: Memory, ns: str, node_id: str) -> set[str]:
    return {m for n in memory.reader.subtree(ns, node_id) if n.level == 1 for m in n.message_ids}


def index(mid: str) -> int:
    return int(mid.rsplit("-", 1)[1])


@pytest.mark.parametrize("mode", ["dense", "hybrid"])
def test_forks_are_copy_on_write_and_isolated(memory: Memory, ns: str, mode: str) -> None:
    from models.api import DeleteRequest
    from services.errors import ConflictError

    memory.writer.remember(
        ns, RememberRequest(conversation_id="p", messages=conversation(("Ann", "Bob"), 40, start=T0))
    )
    a = memory.forks.fork(ns, "p", "m-19", "a")
    b = memory.forks.fork(ns, "p", "m-19", "b")
    assert (a.parent_id, b.parent_id) == ("p", "p") and memory.storage.messages(ns, "a", -1) == []
    for cid, word in (("a", "alpha"), ("b", "beta")):
        memory.writer.remember(
            ns,
            RememberRequest(
                conversation_id=cid,
                messages=conversation(("Ann", "Bob"), 30, start=T0 + timedelta(hours=1), prefix=cid, marker=word),
            ),
        )
    own_a = {n.id for n in memory.storage.source_nodes(ns, "a")}

    def seen(cid: str, text: str = "garden travel cooking music work") -> list:
        return search(memory, ns, text, mode, top_k=100, conversation_id=cid)

    hits = seen("a")
    assert {h.conversation_id for h in hits} == {"a", "p"}
    assert own_a & {h.id for h in hits}
    for h in hits:
        assert "beta" not in h.text
        if h.conversation_id == "p":  # only the parent's memory up to and including m-19
            assert all(index(m) <= 19 for m in covered(memory, ns, h.id)), h.id
            assert h.parent_id is None or all(index(m) <= 19 for m in covered(memory, ns, h.parent_id))
    assert any(h.conversation_id == "p" for h in hits)
    assert {h.conversation_id for h in seen("p")} == {"p"}  # the parent never sees its forks
    assert {h.conversation_id for h in seen("b")} == {"b", "p"}  # nor a fork its sibling

    # a fork of a fork: a2 sees p up to m-19 and a up to a-9
    a2 = memory.forks.fork(ns, "a", "a-9", "a2")
    assert a2.parent_id == "a"
    hits = seen("a2", "alpha garden travel")
    assert {h.conversation_id for h in hits} == {"a", "a2", "p"}  # a2 holds the part of a's chunk up to a-9
    for h in hits:
        assert all(index(m) <= (9 if m.startswith("a-") else 19) for m in covered(memory, ns, h.id)), h.id
    # forking at a message the conversation inherits forks the ancestor that owns it
    assert memory.forks.fork(ns, "a2", "m-3").parent_id == "p"

    # bad input: unknown message, a message the fork does not see, a taken id, a document
    for cid, mid in (("a", "nope"), ("a", "m-30"), ("a2", "a-20"), ("nope", "m-1")):
        with pytest.raises(NotFoundError):
            memory.forks.fork(ns, cid, mid)
    with pytest.raises(ConflictError):
        memory.forks.fork(ns, "p", "m-1", "b")

    # deleting an inherited parent message removes it from the parent and every fork
    memory.deleter.delete(ns, DeleteRequest(ids=["m-5"]))
    for cid in ("p", "a", "a2"):
        assert all("m-5" not in covered(memory, ns, h.id) for h in seen(cid)), cid
        assert not any("(note 5)" in h.text for h in seen(cid) if h.conversation_id == "p"), cid
    assert {h.conversation_id for h in seen("a")} == {"a", "p"}


def test_a_fork_read_through_a_grant_sees_its_inheritance_within_the_limits_and_with_neighbours(
    memory: Memory, ns: str
) -> None:
    """One read path for every caller: a query filtered to a fork goes through the same validation,
    lineage and neighbours whether the caller owns the namespace or reads it through a grant."""
    team = ns + "-team"
    memory.writer.remember(
        team, RememberRequest(conversation_id="p", messages=conversation(("Ann", "Bob"), 40, start=T0))
    )
    memory.forks.fork(team, "p", "m-19", "f")
    q = Query(query="garden travel cooking music work", top_k=10, filter=QueryFilter(conversation_id="f"), mode="dense")
    own = memory.reader.query(team, [q]).results[0].results
    # the fork inherits the parent's first half, and holds the part of the chunk straddling m-19 up to it
    assert own and {r.conversation_id for r in own} == {"p", "f"}
    granted = memory.reader.query(ns, [q], [team]).results[0].results  # read-only, through a grant
    assert [(r.id, r.namespace) for r in granted] == [(r.id, team) for r in own]
    assert all(index(m) <= 19 for r in granted for m in covered(memory, team, r.id))
    for bad, field in (
        (q.model_copy(update={"top_k": memory.settings.max_top_k + 1}), "queries[0].top_k"),
        (q.model_copy(update={"query": "x" * (memory.settings.max_query_chars + 1)}), "queries[0].query"),
    ):
        for namespaces in (None, [team]):
            with pytest.raises(InvalidRequestError) as err:
                memory.reader.query(team if namespaces is None else ns, [bad], namespaces)
            assert err.value.field == field
    near = memory.reader.query(team, [q.model_copy(update={"top_k": 1, "neighbours": 1})]).results[0].results
    hits = [r for r in near if r.context_of is None]
    assert len(hits) == 1 and any(r.context_of in {h.id for h in hits} for r in near)  # neighbours were added
    assert all(
        r.conversation_id in ("p", "f") and all(index(m) <= 19 for m in covered(memory, team, r.id)) for r in near
    )


# ---------------------------------------------------------------------- shared read-only memory
def test_query_shared_names_namespaces_and_writes_nothing_to_the_read_ones(memory: Memory, ns: str) -> None:
    team = ns + "-team"
    memory.writer.remember(
        team,
        RememberRequest(
            conversation_id="handbook", messages=conversation(("Ann", "Bob"), 12, topics=["garden"], prefix="t")
        ),
    )
    memory.writer.remember(
        ns,
        RememberRequest(
            conversation_id="mine", messages=conversation(("Ann", "Bob"), 12, topics=["music"], prefix="n")
        ),
    )
    q = [Query(query="the compost heap and the cello", top_k=3, mode="dense")]
    res = memory.reader.query(ns, q, [ns, team]).results[0].results
    assert {r.namespace for r in res} == {ns, team}
    assert all(r.conversation_id == ("handbook" if r.namespace == team else "mine") for r in res)
    assert [r.score for r in res] == sorted((r.score for r in res), reverse=True) and len(res) == 3
    memory.visits.flush()
    assert mark_table(memory).get(team, None) == {} and mark_table(memory).get(ns, None)


def test_a_fork_holds_the_part_of_the_straddling_chunk_before_its_fork_point(memory: Memory, ns: str) -> None:
    """On every provider, a fork inherits the parent's chunks before the one straddling its
    fork point and holds that one's first part (up to the fork message) as its own chunk, which its messages
    continue (positions, token offsets, overlap); a parent's change before the fork point rebuilds it; a dump
    carries it like any node."""
    from datastore.portability.dump import export_lines, import_dump
    from datastore.read.lineage import lineage
    from models.api import DeleteRequest
    from tests.support.invariants import check_tree

    s = memory.settings
    memory.writer.remember(
        ns, RememberRequest(conversation_id="p", messages=conversation(("Ann", "Bob"), 40, start=T0))
    )
    chunks = memory.storage.source_nodes(ns, "p", level=1)
    third = chunks[2]
    at = third.message_ids[len(third.message_ids) // 2]
    memory.forks.fork(ns, "p", at, "f")

    def view(cid: str) -> tuple[list, list]:
        """(the parent's L1 chunks the fork inherits, the fork's own L1 chunks), in stream order."""
        (_, _), (parent, ids) = lineage(memory.storage, ns, cid)
        inherited = [n for n in memory.storage.source_nodes(ns, parent, level=1) if ids is not None and n.id in ids]
        return inherited, memory.storage.source_nodes(ns, cid, level=1)

    def stream_ok(cid: str, last: str) -> None:
        """The fork's chunks continue the inherited ones (shared overlap, positions from 0), and between them
        they cover the parent's messages up to `last` and none after."""
        inherited, own = view(cid)
        chain = inherited + own
        assert all(
            a.tok_start < b.tok_start <= a.tok_end and a.tok_end - b.tok_start <= s.chunk_overlap
            for a, b in zip(chain, chain[1:], strict=False)
        )
        assert [n.position for n in own] == list(range(len(own)))
        parent_ids = [m.id for m in memory.storage.messages(ns, "p")]
        covered = {m for n in chain for m in n.message_ids if m in parent_ids}
        assert covered == set(parent_ids[: parent_ids.index(last) + 1])

    inherited, own = view("f")
    assert [n.id for n in inherited] == [chunks[0].id, chunks[1].id]  # copy-on-write: nothing earlier is copied
    assert len(own) == 1 and not own[0].sealed and own[0].message_ids[-1] == at
    assert (
        own[0].tok_end
        == next(m for m in memory.storage.messages(ns, "p") if m.id == at).tok_offset
        + next(m for m in memory.storage.messages(ns, "p") if m.id == at).n_tokens
    )
    stream_ok("f", at)

    memory.writer.remember(
        ns,
        RememberRequest(
            conversation_id="f",
            messages=conversation(("Ann", "Bob"), 30, start=T0 + timedelta(hours=1), prefix="f", marker="branch"),
        ),
    )
    own = memory.storage.source_nodes(ns, "f", level=1)
    assert own[0].message_ids[-1].startswith("f-") and at in own[0].message_ids  # its messages continue the chunk
    check_tree(memory.storage.source_nodes(ns, "f"), s.chunk_size, s.chunk_overlap, s.fan_out)
    stream_ok("f", at)

    # a parent message the fork's own chunk holds, then one it inherits: forgotten in the fork too
    before = own[0].message_ids[own[0].message_ids.index(at) - 1]
    memory.deleter.delete(ns, DeleteRequest(ids=[before, "m-2"]))
    for n in memory.storage.source_nodes(ns, "f") + view("f")[0]:
        assert before not in n.message_ids and "m-2" not in n.message_ids and "(note 2).\n" not in n.text
    check_tree(memory.storage.source_nodes(ns, "f"), s.chunk_size, s.chunk_overlap, s.fan_out)
    stream_ok("f", at)
    hits = search(memory, ns, "garden travel cooking music work branch", "dense", top_k=100, conversation_id="f")
    assert at in {m for h in hits for m in h.message_ids}
    # the fork message itself: the fork point moves to the message before it
    memory.deleter.delete(ns, DeleteRequest(ids=[at]))
    previous = max((m for m in memory.storage.messages(ns, "p") if index(m.id) < index(at)), key=lambda m: m.seq)
    stream_ok("f", previous.id)

    # export and import carry the fork's own chunks like any node
    copy = ns + "-copy"
    import_dump(memory, list(export_lines(memory, [ns], embeddings=True)), namespace=copy)
    assert memory.storage.source_nodes(copy, "f") == memory.storage.source_nodes(ns, "f")
    again = search(memory, copy, "garden travel cooking music work branch", "dense", top_k=100, conversation_id="f")
    assert [h.id for h in again] == [
        h.id
        for h in search(memory, ns, "garden travel cooking music work branch", "dense", top_k=100, conversation_id="f")
    ]


def test_a_fork_made_before_bases_keeps_its_view_until_it_gets_one(memory: Memory, ns: str) -> None:
    """A fork record written by an earlier version (no `tok_at`: nothing of the parent held) still reads as it
    did; forking it, or a rebuild of it, gives it its base and lists it in its parent's `forks`."""
    from datastore.read.lineage import fork_info
    from datastore.storage import SourceRow, WriteBatch

    memory.writer.remember(
        ns, RememberRequest(conversation_id="p", messages=conversation(("Ann", "Bob"), 40, start=T0))
    )
    old = {"parent_id": "p", "at_message_id": "m-19", "at_seq": 19, "at_time": (T0 + timedelta(minutes=19)).isoformat()}
    memory.storage.commit(ns, WriteBatch(source=SourceRow("old", "conversation", 1, metadata={"fork": old})), 0)
    memory.writer.remember(
        ns,
        RememberRequest(
            conversation_id="old", messages=conversation(("Ann", "Bob"), 12, start=T0 + timedelta(hours=1), prefix="o")
        ),
    )
    hits = search(memory, ns, "garden travel cooking music work", "dense", top_k=100, conversation_id="old")
    inherited = {m for h in hits if h.conversation_id == "p" for m in covered(memory, ns, h.id)}
    assert inherited and max(index(m) for m in inherited) < 19  # the straddling chunk stays unseen, as before
    assert memory.storage.messages(ns, "old")[0].tok_offset == 0

    memory.forks.fork(ns, "old", "o-5", "new")  # forking it gives it its base first
    assert "tok_at" in (fork_info(memory.storage, ns, "old") or {})
    assert "old" in (memory.storage.get_source(ns, "p").metadata.get("forks") or [])  # type: ignore[union-attr]
    for cid, last in (("old", 19), ("new", 19)):
        hits = search(memory, ns, "garden travel cooking music work", "dense", top_k=100, conversation_id=cid)
        seen = {m for h in hits for m in h.message_ids if m.startswith("m-")}
        assert seen == {f"m-{i}" for i in range(last + 1)}, cid
    hits = search(memory, ns, "garden travel cooking music work", "dense", top_k=100, conversation_id="new")
    assert {m for h in hits for m in h.message_ids if m.startswith("o-")} == {f"o-{i}" for i in range(6)}


# ---------------------------------------------------------------------- messages in time order
def test_a_message_remembered_late_takes_its_place_by_time(memory: Memory, ns: str) -> None:
    """On every provider, a message whose created_at is earlier than the conversation's
    latest (one re-remembered after its deletion) is inserted in time order, inline or through the background
    steps, and the tree is rebuilt from there: it ends exactly as if everything had been remembered in order at
    once, forks included."""
    from models.api import DeleteRequest
    from tests.support.invariants import check_tree

    s = memory.settings
    msgs = conversation(("Ann", "Bob"), 40, start=T0)
    memory.writer.remember(ns, RememberRequest(conversation_id="ref", messages=msgs))
    memory.writer.remember(ns, RememberRequest(conversation_id="c", messages=msgs))
    memory.forks.fork(ns, "c", "m-20", "f")
    memory.deleter.delete(ns, DeleteRequest(ids=["m-5", "m-33", "m-34"], conversation_id="c"))

    def tree(cid: str) -> list[tuple]:
        return [
            (n.level, n.position, n.text, n.message_ids, n.sealed, n.session_ids)
            for n in memory.storage.source_nodes(ns, cid)
        ]

    memory.writer.remember(ns, RememberRequest(conversation_id="c", messages=[msgs[33], msgs[34]]))  # inline
    memory.writer.accept(ns, RememberRequest(conversation_id="c", messages=[msgs[5]]))  # stored now, indexed later
    assert [m.id for m in memory.storage.messages(ns, "c")] == [m.id for m in msgs]
    memory.steps.backlog()
    assert [(m.id, m.seq, m.tok_offset, m.session_id) for m in memory.storage.messages(ns, "c")] == [
        (m.id, m.seq, m.tok_offset, m.session_id) for m in memory.storage.messages(ns, "ref")
    ]
    assert tree("c") == tree("ref")
    check_tree(memory.storage.source_nodes(ns, "c"), s.chunk_size, s.chunk_overlap, s.fan_out)
    hits = search(memory, ns, "garden travel cooking music work", "dense", top_k=100, conversation_id="f")
    assert {m for h in hits for m in h.message_ids} == {f"m-{i}" for i in range(21)}  # the fork sees m-5 again


def test_a_forks_stream_is_read_for_many_ranges_at_once(memory: Memory, ns: str) -> None:
    """`stream_messages_in` reads a fork's stream for many token ranges as `stream_messages` reads each one (the
    parent's messages before the fork point, then the fork's own), with one `messages_in` a source of the lineage;
    a `SpanReader` told the ranges ahead (`read`) serves each from what it read, reading nothing more."""
    from datastore.read.lineage import stream_messages, stream_messages_in
    from datastore.write.spans import SpanReader

    memory.writer.remember(
        ns, RememberRequest(conversation_id="p", messages=conversation(("Ann", "Bob"), 40, start=T0))
    )
    third = memory.storage.source_nodes(ns, "p", level=1)[2]
    memory.forks.fork(ns, "p", third.message_ids[len(third.message_ids) // 2], "f")
    memory.writer.remember(
        ns,
        RememberRequest(
            conversation_id="f",
            messages=conversation(("Ann", "Bob"), 10, start=T0 + timedelta(hours=1), prefix="f"),
        ),
    )
    every = stream_messages(memory.storage, ns, "f")
    own = next(m.tok_offset for m in every if m.source_id == "f")  # the fork point in the fork's stream
    end = every[-1].tok_offset + every[-1].n_tokens
    assert every[0].source_id == "p" and every[-1].source_id == "f"
    ranges = [(own + 20, end + 10), (0, 5), (own - 3, own + 3), (40, 30)]  # any order; the last one empty
    want = {m.id for lo, hi in ranges if hi > lo for m in stream_messages(memory.storage, ns, "f", lo, hi)}
    counted = CountedStorage(memory.storage)
    got = stream_messages_in(cast(Storage, counted), ns, "f", ranges)
    assert [m.id for m in got] == [m.id for m in every if m.id in want]
    assert counted.calls["messages_in"] == 2 and counted.calls["messages"] == 0  # one read a source
    reader = SpanReader(cast(Storage, counted), ns, "f")
    reader.read([], ranges)
    counted.calls.clear()
    for lo, hi in ranges[:3]:
        assert reader.messages(lo, hi) == stream_messages(memory.storage, ns, "f", lo, hi)
    assert not counted.calls
