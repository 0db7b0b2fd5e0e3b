"""Pinecone-only behaviour, against the needledb emulator (data plane) started by conftest.py.

Index management (create_index, describe_index) is not emulated by needledb. `test_missing_index_is_created`
covers it with scripted control-plane responses: a loopback HTTP server answers the SDK's 2026-07 control-plane
requests (404 for the missing index, then the created index) in the response shape of the SDK's own
`IndexModel`, and creates the index in needledb so the data plane behind the returned host is real. These are
not captures of the live service (the test machines have no route to api.pinecone.io).
"""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from pinecone import ApiError

from datastore.factory import open_memory
from datastore.memory import Memory
from datastore.providers.pinecone import client as pc_client
from datastore.providers.pinecone import records as pinecone_records
from datastore.storage import sentences_text
from loopback.servers import Needle
from models.api import Message, Query, RememberRequest
from models.core import CoreEntry
from services.chunking import split_message
from services.embedding import LocalEmbedder
from services.errors import EmbeddingMismatchError, StoreError
from services.summarising import ExtractiveSummariser
from tests.support.embedders import OtherEmbedder
from tests.support.invariants import check_tree
from tests.support.settings import make_settings
from tests.support.synthetic import conversation

pinecone_only = pytest.mark.parametrize("provider_settings", ["pinecone"], indirect=True)


@pinecone_only
def test_a_message_over_the_40kb_metadata_limit_is_stored_in_parts(memory: Memory, ns: str) -> None:
    big = "Look: " + "—" * 14000 + " the end."  # 42 KB of UTF-8 (3 bytes a dash) but only ~900 tokens
    msgs = [Message(id="big", speaker="Alice", content=big), Message(id="small", speaker="Bob", content="ok.")]
    memory.writer.remember(ns, RememberRequest(conversation_id="c", messages=msgs))
    stored = {m.id: m for m in memory.storage.messages(ns, "c", -1)}
    assert stored["big"].content == big and stored["small"].content == "ok."
    ids = memory.storage.client.list_ids(ns, "msg#")  # type: ignore[attr-defined]
    assert sum(1 for i in ids if pinecone_records.is_part(i)) >= 2
    s = memory.settings
    check_tree(memory.storage.source_nodes(ns, "c"), s.chunk_size, s.chunk_overlap, s.fan_out, s.max_level)


@pinecone_only
def test_a_message_of_thousands_of_sentences_keeps_them_without_its_list_in_metadata(memory: Memory, ns: str) -> None:
    many = " ".join(f"Step {i} done." for i in range(1500))  # 1,500 sentences: their list is ~20 KB of JSON
    memory.writer.remember(
        ns, RememberRequest(conversation_id="c", messages=[Message(id="m", speaker="Ann", content=many)])
    )
    [stored] = memory.storage.messages(ns, "c")
    split = split_message(many)
    assert len(sentences_text(stored.model_copy(update={"sentences": split}))) > pinecone_records.SENTENCES_MAX
    assert stored.content == many and stored.sentences == []  # left out of the record: split again when read
    assert sum(x.tokens for x in split) == stored.n_tokens  # the same sentences the offsets were measured on
    s = memory.settings
    check_tree(memory.storage.source_nodes(ns, "c"), s.chunk_size, s.chunk_overlap, s.fan_out, s.max_level)


@pinecone_only
def test_reads_past_the_query_cap_fall_back_to_listing(
    memory: Memory, ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    messages = conversation(("Alice", "Bob"), 40)
    memory.writer.remember(ns, RememberRequest(conversation_id="c", messages=messages))
    storage = memory.storage
    full = (storage.messages(ns, "c"), storage.frontier(ns, "c"), storage.find_messages(ns, ids=["m-1", "m-2"]))
    monkeypatch.setattr(pc_client, "_QUERY_CAP", 3)  # every filtered read now hits the cap
    capped = (storage.messages(ns, "c"), storage.frontier(ns, "c"), storage.find_messages(ns, ids=["m-1", "m-2"]))
    assert [m.id for m in capped[0]] == [m.id for m in full[0]] == [m.id for m in messages]
    assert {n.id for n in capped[1]} == {n.id for n in full[1]}
    assert sorted(capped[2]) == sorted(full[2]) == [("c", "m-1"), ("c", "m-2")]


@pinecone_only
def test_another_model_of_the_same_dimension_is_refused(memory: Memory, open_store: Callable[..., Memory]) -> None:
    class SameSize(OtherEmbedder):
        model_name = "another-384-model"
        dimension = 384

    with pytest.raises(EmbeddingMismatchError, match="all-MiniLM-L6-v2"):
        open_store(SameSize())


def test_only_rate_limits_server_errors_and_dropped_connections_are_retried() -> None:
    from pinecone import PineconeConnectionError

    assert pc_client._retryable(ApiError("slow down", 429))
    assert pc_client._retryable(ApiError("unavailable", 503))
    assert pc_client._retryable(PineconeConnectionError("reset"))
    assert not pc_client._retryable(ApiError("bad filter", 400))
    assert not pc_client._retryable(ValueError("no"))


# ---------------------------------------------------------------------- control plane (scripted responses)
class _ControlPlane(BaseHTTPRequestHandler):
    """GET/POST /indexes[/name] of the 2026-07 control-plane API, backed by a needledb for the data plane."""

    needle: Needle
    indexes: dict[str, dict[str, Any]]
    requests: list[tuple[str, str, Any]]

    def _send(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802
        name = self.path.rsplit("/", 1)[1]
        self.requests.append(("GET", self.path, None))
        if name in self.indexes:
            self._send(200, self.indexes[name])
        else:
            self._send(404, {"error": {"code": "NOT_FOUND", "message": f"Resource {name} not found"}, "status": 404})

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.requests.append(("POST", self.path, body))
        field = body["schema"]["fields"]["_values"]
        req = urllib.request.Request(
            f"{self.needle.base}/indexes",
            json.dumps({"name": body["name"], "dimension": field["dimension"], "metric": field["metric"]}).encode(),
            {"Content-Type": "application/json"},
        )
        urllib.request.urlopen(req, timeout=10).close()
        model = {
            "name": body["name"],
            "host": f"{self.needle.base}/indexes/{body['name']}",
            "status": {"ready": True, "state": "Ready"},
            "schema": body["schema"],
            "deployment": body["deployment"],
            "deletion_protection": "disabled",
            "tags": None,
        }
        self.indexes[body["name"]] = model
        self._send(201, model)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def control_plane(needle_server: Needle | str, monkeypatch: pytest.MonkeyPatch) -> Iterator[type[_ControlPlane]]:
    if isinstance(needle_server, str):
        pytest.skip(needle_server)
    handler = type("Handler", (_ControlPlane,), {"needle": needle_server, "indexes": {}, "requests": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("PINECONE_CONTROLLER_HOST", f"http://127.0.0.1:{server.server_address[1]}")
    yield handler
    server.shutdown()
    server.server_close()
    thread.join(5)


@pinecone_only
def test_missing_index_is_created_serverless_with_the_embedder_dimension(
    control_plane: type[_ControlPlane], open_store: Callable[..., Memory], ns: str
) -> None:
    memory = open_store(
        pinecone_host=None, pinecone_index="made-here", pinecone_cloud="gcp", pinecone_region="europe-west4"
    )
    posts = [body for method, _, body in control_plane.requests if method == "POST"]
    assert len(posts) == 1 and posts[0]["name"] == "made-here"
    assert posts[0]["schema"]["fields"]["_values"] == {"type": "dense_vector", "dimension": 384, "metric": "cosine"}
    assert posts[0]["deployment"] == {"deployment_type": "managed", "cloud": "gcp", "region": "europe-west4"}
    memory.writer.remember(ns, RememberRequest(conversation_id="c", messages=conversation(("Alice", "Bob"), 10)))
    assert memory.reader.query(ns, [Query(query="garden tomatoes")]).results[0].results
    open_store(pinecone_host=None, pinecone_index="made-here")  # exists now: no second create
    assert sum(1 for method, _, _ in control_plane.requests if method == "POST") == 1


def test_a_missing_key_is_a_clear_store_error(tmp_path: Path, embedder: LocalEmbedder) -> None:
    with pytest.raises(StoreError, match="PINECONE_API_KEY"):
        open_memory(make_settings(tmp_path, datastore="pinecone"), embedder, ExtractiveSummariser())


@pinecone_only
def test_a_long_core_entry_is_kept_in_parts_and_its_parts_go_with_it(memory: Memory, ns: str) -> None:
    table = memory.storage.core
    assert table is not None
    at = datetime(2026, 3, 1, tzinfo=UTC)
    long = CoreEntry(key="bio", value='"\x01' * 9000, importance=50, created_at=at, updated_at=at, tokens=1)
    table.write(ns, "", long, [])
    parts = [i for i in memory.storage.client.list_ids(ns, "core#") if pinecone_records.is_part(i)]  # type: ignore[attr-defined]
    assert len(parts) >= 2 and table.entries(ns, [""]) == [long]
    short = long.model_copy(update={"value": "a cellist"})
    table.write(ns, "", short, [])
    assert memory.storage.client.list_ids(ns, "core#") == [pinecone_records.core_id("", "bio")]  # type: ignore[attr-defined]
    assert table.entries(ns, [""]) == [short]
    table.write(ns, "", long, [])
    assert table.write(ns, "", None, ["bio"]) == 1 and memory.storage.client.list_ids(ns, "core#") == []  # type: ignore[attr-defined]
