"""Smoke checks of the speed and load benchmarks' arithmetic on hand-checked data (not speed)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from bench import load, synthetic
from bench.common import bench_settings
from bench.meters import CountingSummariser, peak_rss_mib, percentiles, proc_peak_rss_mib
from datastore.factory import open_memory
from datastore.providers.local import LocalStorage
from services import tokens
from services.embedding import LocalEmbedder
from services.summarising import ExtractiveSummariser, Span


def test_percentiles_of_one_to_a_hundred() -> None:
    assert percentiles([float(i) for i in range(1, 101)]) == {
        "n": 100,
        "p50": 50.5,
        "p95": 95.05,
        "p99": 99.01,
        "mean": 50.5,
    }


def test_summariser_cost_counts_calls_and_tokens_sent() -> None:
    counting = CountingSummariser(ExtractiveSummariser())
    texts, context = ["Ann: I moved to Porto in May.", "Bob: How is the weather there?"], "Ann: she sold her car."
    counting.summarise(Span([], texts, context), 50)
    counting.summarise(Span([], texts, None), 50)
    assert counting.calls == 2
    assert counting.tokens_in == 2 * sum(tokens.count_tokens(t) for t in texts) + tokens.count_tokens(context)


def test_rss_is_read_for_this_process() -> None:
    assert peak_rss_mib() > 10
    assert proc_peak_rss_mib(os.getpid()) == peak_rss_mib()
    assert proc_peak_rss_mib(2**22 + 7) is None  # no such process


def test_load_windows_and_summary() -> None:
    # (kind, sent at, done at, error): 4 successes of 10/20/30/40 ms, one 5xx, one shed, in the first 10 s
    done = [
        ("query", 1.0, 1.01, None),
        ("query", 2.0, 2.02, None),
        ("remember", 3.0, 3.03, None),
        ("query", 4.0, 4.04, None),
        ("query", 5.0, 5.5, "500"),
        ("query", 6.0, 6.0, "shed"),
        ("query", 12.0, 12.01, None),
    ]
    fake = SimpleNamespace(done=done, in_flight=0)
    w = load.window(fake, 0.0, 10.0, 10.0, pid=2**22 + 7)  # type: ignore[arg-type]
    assert (w.completed, w.errors, w.shed, w.error_rate, w.rate) == (6, 2, 1, round(2 / 6, 4), 0.6)
    assert w.p50_ms == 25.0 and w.remember_p50_ms == 30.0 and w.rss_mib is None
    run = load.Run(args={"duration": 20})
    run.windows = [
        load.Window(10, 6, 2, 1, 0.33, 25, 40, 40, 0.6, 0, 100.0),
        load.Window(20, 1, 0, 0, 0.0, 10, 10, 10, 0.1, 0, 115.0),
    ]
    s = load.summarise(fake, run, warmup=5.0)  # type: ignore[arg-type]
    assert (s["requests"], s["errors"], s["shed"], s["achieved_rate"]) == (7, 2, 1, round(7 / 20, 1))
    assert s["rss_growth_after_warmup"] == 0.15 and s["rss_grew_over_10pct"] is True
    assert run.errors_by_kind == {"500": 1, "shed": 1}


def test_the_synthetic_scale_store_is_a_finished_tree(tmp_path: Path, embedder: LocalEmbedder) -> None:
    """bench.speed times queries over bench/synthetic.py's store: its chunks must already be rolled up as
    remember would (else the server's indexer summarises them while queries are timed), and each summary's
    vector is the normalised mean of its children's."""
    memory = open_memory(bench_settings(tmp_path / "synthetic.db"), embedder, ExtractiveSummariser())
    assert isinstance(memory.storage, LocalStorage)
    try:
        synthetic.fill(memory, "default", 2_000)
        assert memory.storage.unrolled() == []  # nothing left for the background indexer
        db = memory.storage.db.reader
        rows = db.execute("SELECT level, COUNT(*) FROM nodes GROUP BY level ORDER BY level").fetchall()
        assert [tuple(r) for r in rows] == [(1, 2_000), (2, 400), (3, 80), (4, 16), (5, 2)]
        top = db.execute("SELECT id FROM nodes WHERE level = 5 LIMIT 1").fetchone()[0]
        node = memory.reader.get_node("default", top)
        vectors = memory.storage.get_vectors("default", [node.id, *node.children])
        mean = np.sum([vectors[c] for c in node.children], axis=0)
        assert np.allclose(vectors[node.id], mean / np.linalg.norm(mean), atol=1e-3)
        assert all(memory.reader.get_node("default", c).parent_id == node.id for c in node.children)
    finally:
        memory.close()


def test_speed_postgres_writes_its_figures_into_a_fresh_out_folder(tmp_path: Path, monkeypatch) -> None:
    """`python -m bench.speed --postgres` on a fresh clone ran for minutes, then crashed writing
    bench/out/speed_pgvector.json: nothing on that path made the folder. The minutes of work are stood in for
    (no PostgreSQL, no dataset); what is written, and where, is the benchmark's own code."""
    from bench import common, speed

    out = tmp_path / "fresh" / "out"  # as on a fresh clone: not there
    sections: dict[str, str] = {}
    monkeypatch.setattr(common, "OUT", out)
    monkeypatch.setattr(common, "write_section", lambda name, body, path=None: sections.update({name: body}))
    monkeypatch.setattr(speed.dataset, "load", lambda: [])
    monkeypatch.setattr(speed, "postgres_points", lambda questions, sizes: [])
    speed.main(["--postgres", "--sizes", "10"])
    written = json.loads((out / "speed_pgvector.json").read_text())
    assert written["scale_pg"] == [] and written["elapsed_s"] >= 0
    assert "Speed on PostgreSQL + pgvector" in sections["speed-pgvector"]
