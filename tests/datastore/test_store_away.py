"""A store that goes away mid-request: PostgreSQL stopped under a running app answers 503 naming the store, and
when it is back every acknowledged message is there and searchable (the in-memory index of the namespace is
dropped on the failure, never served stale)."""

from __future__ import annotations

from pathlib import Path

from datastore.factory import open_memory
from loopback.servers import Postgres
from services.embedding import LocalEmbedder
from services.summarising import ExtractiveSummariser
from tests.support.settings import AUTH, make_settings
from tests.support.stores import unavailable


def _pg_ctl(pg: Postgres, *args: str) -> None:
    pg._run("pg_ctl", "-D", str(pg.data), *args)


async def test_postgres_going_away_is_a_503_naming_it_and_loses_nothing(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    from server.app import create_app

    try:
        pg = Postgres().start()
    except Exception as exc:
        unavailable(f"PostgreSQL (pgserver wheel) could not start: {exc}")
        return
    try:
        settings = make_settings(tmp_path, datastore="postgres", postgres_url=pg.create_database(), pg_pool_size=2)
        memory = open_memory(settings, embedder, ExtractiveSummariser())
        app = create_app(settings, memory)
        body = {"conversation_id": "c", "wait": True, "messages": [{"speaker": "Ann", "content": "The kiln is blue."}]}
        query = {"queries": [{"query": "kiln", "top_k": 3}]}
        async with app.test_app() as test_app:
            client = test_app.test_client()
            assert (await client.post("/remember", json=body, headers=AUTH)).status_code == 200
            assert (await (await client.post("/query", json=query, headers=AUTH)).get_json())["results"][0]["results"]
            _pg_ctl(pg, "-m", "immediate", "-w", "stop")
            r = await client.post("/query", json=query, headers=AUTH)
            assert r.status_code == 503, await r.get_data()
            error = (await r.get_json())["error"]
            assert error["code"] == "store_unavailable" and "POSTGRES_URL" in error["message"]
            _pg_ctl(
                pg,
                "-l",
                str(pg.root / "log"),
                "-w",
                "-t",
                "60",
                "-o",
                f"-h 127.0.0.1 -p {pg.port} -k {pg.root} -F",
                "start",
            )
            for _ in range(20):  # the pool reconnects; a request before that may still be a 503
                r = await client.post("/query", json=query, headers=AUTH)
                if r.status_code == 200:
                    break
            assert r.status_code == 200
            hits = (await r.get_json())["results"][0]["results"]
            assert [h["text"] for h in hits if "kiln" in h["text"]]
        memory.close()
    finally:
        pg.stop()
