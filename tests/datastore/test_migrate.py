"""`datastore.migrate`: a local store copied into each provider (local, pgvector, pinecone) as it is."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from pyramind.datastore.datastore import DataStore, WriteBatch
from pyramind.datastore.migrate import migrate
from pyramind.datastore.providers.local import LocalDataStore
from pyramind.models.api import Document, Query, RememberRequest
from pyramind.services.embedding import LocalEmbedder
from pyramind.services.errors import EmbeddingMismatchError
from pyramind.services.summarising import ExtractiveSummariser
from tests.conftest import make_settings
from tests.datastore.conftest import OtherEmbedder, unavailable
from tests.datastore.synthetic import conversation, document_text


@pytest.fixture
def source(tmp_path: Path, embedder: LocalEmbedder, ns: str) -> Iterator[DataStore]:
    """A local store with two namespaces: two conversations and a document in `ns`, one conversation in `ns-2`."""
    (tmp_path / "src").mkdir()
    store = LocalDataStore(make_settings(tmp_path / "src"), embedder, ExtractiveSummariser()).open()
    store.remember_sync(ns, RememberRequest(conversation_id="c1", messages=conversation(("Alice", "Bob"), 60)))
    store.remember_sync(ns, RememberRequest(conversation_id="c2", messages=conversation(("Carol", "Dan"), 12)))
    store.upsert_sync(ns, [Document(id="d1", text=document_text(8, "work"))])
    store.remember_sync(f"{ns}-2", RememberRequest(conversation_id="c1", messages=conversation(("Eve", "Fay"), 9)))
    yield store
    store.close()


def _dump(store: DataStore, ns: str, sid: str) -> tuple:
    nodes = store._source_nodes(ns, sid)
    vectors = store._get_vectors(ns, [n.id for n in nodes])
    return (store._get_source(ns, sid), [m.model_dump() for m in store._messages_from(ns, sid, -1)],
            [n.model_dump() for n in nodes], {k: np.round(v, 5).tolist() for k, v in vectors.items()})


def test_everything_is_copied_verified_and_a_rerun_skips_it(source: DataStore, ds: DataStore, ns: str) -> None:
    seen: list[tuple] = []
    report = migrate(source, ds, [ns, f"{ns}-2"], lambda *event: seen.append(event))
    assert report["sources"] == 4 and report["copied"] == 4 and report["skipped"] == 0
    assert report["namespaces"][ns]["messages"] == 73 and report["nodes"] > 10
    assert seen[-1] == (f"{ns}-2", "c1", 1, 1, "copied")
    for space, sid in ((ns, "c1"), (ns, "c2"), (ns, "d1"), (f"{ns}-2", "c1")):
        assert _dump(ds, space, sid) == _dump(source, space, sid)
    q = [Query(query="the server migration ran all weekend", top_k=3)]
    assert [r.id for r in ds.query_sync(ns, q).results[0].results] == \
        [r.id for r in source.query_sync(ns, q).results[0].results]

    again = migrate(source, ds, [ns, f"{ns}-2"], None)
    assert again["copied"] == 0 and again["skipped"] == 4


def test_an_interrupted_copy_resumes(source: DataStore, ds: DataStore, ns: str) -> None:
    migrate(source, ds, [ns], None)
    c2 = ds._get_source(ns, "c2")
    ds._commit(ns, WriteBatch(source=c2, delete_source=True), c2.version)  # type: ignore[arg-type, union-attr]
    source.remember_sync(ns, RememberRequest(conversation_id="c1", messages=conversation(("Alice", "Bob"), 5,
                                                                                         first=60)))
    report = migrate(source, ds, [ns], None)
    assert report["copied"] == 2 and report["skipped"] == 1  # c2 was missing, c1 changed, d1 is as it was
    for sid in ("c1", "c2"):
        assert _dump(ds, ns, sid) == _dump(source, ns, sid)


def test_all_namespaces_by_default(source: DataStore, tmp_path: Path, embedder: LocalEmbedder) -> None:
    (tmp_path / "dst").mkdir()
    dst = LocalDataStore(make_settings(tmp_path / "dst"), embedder, ExtractiveSummariser()).open()
    try:
        assert set(migrate(source, dst)["namespaces"]) == set(source._list_namespaces())
        assert dst._list_namespaces() == source._list_namespaces()
    finally:
        dst.close()


def test_stores_of_different_embedders_are_refused(source: DataStore, tmp_path: Path) -> None:
    (tmp_path / "other").mkdir()
    other = LocalDataStore(make_settings(tmp_path / "other"), OtherEmbedder(), ExtractiveSummariser()).open()  # type: ignore[arg-type]
    try:
        with pytest.raises(EmbeddingMismatchError):
            migrate(source, other)
    finally:
        other.close()


def test_cli_migrates_local_to_postgres(source: DataStore, pg_server, ns: str) -> None:  # type: ignore[no-untyped-def]
    """`pyramind migrate --from local --to postgres`, configured from the environment as a user would."""
    from typer.testing import CliRunner

    from pyramind.datastore.factory import get_datastore
    from pyramind.local_server.cli import app

    if isinstance(pg_server, str):
        unavailable(pg_server)
    url = pg_server.create_database()
    env = {"LOCAL_DB_PATH": str(source.settings.local_db_path), "POSTGRES_URL": url, "COLUMNS": "200"}
    r = CliRunner().invoke(app, ["migrate", "--from", "local", "--to", "postgres"], env=env)
    assert r.exit_code == 0, r.output
    assert "4 sources copied, 0 already there" in r.output
    r = CliRunner().invoke(app, ["migrate", "--from", "local", "--to", "postgres"], env=env)
    assert "0 sources copied, 4 already there" in r.output
    dst = get_datastore(make_settings(source.settings.local_db_path.parent, datastore="postgres", postgres_url=url),
                        source.embedder, source.summariser)
    try:
        assert _dump(dst, ns, "c1") == _dump(source, ns, "c1")
    finally:
        dst.close()
