"""`--datastore local|postgres|pinecone` of bench.recall, bench.context and bench.beam: each run as a user runs it
(`python -m bench.X`, a subprocess: tests never import bench/) on tiny data written here, its outputs under
$BENCH_OUT (a temporary folder), PostgreSQL and needledb started and stopped by the benchmark itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.tests.chats import SAMPLE, write_chat

ROOT = Path(__file__).resolve().parents[2]
PROVIDERS = ["local", "postgres", "pinecone"]


def bench(tmp_path: Path, *args: str) -> None:
    """Run `python -m bench.<args>` with its outputs under tmp_path/out; RESULTS.md is left as it was."""
    results = ROOT / "bench" / "RESULTS.md"
    before = results.read_text()
    env = {**os.environ, "BENCH_OUT": str(tmp_path / "out")}
    env.pop("PINECONE_API_KEY", None)
    env.pop("DATASTORE", None)
    done = subprocess.run([sys.executable, "-m", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert results.read_text() == before  # tiny data: the JSON only


@pytest.fixture
def locomo(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps([SAMPLE]))
    return path


def test_bench_context_runs_every_provider_into_one_table(tmp_path: Path, locomo: Path) -> None:
    out = tmp_path / "context.json"
    bench(tmp_path, "bench.context", "--data", str(locomo), "--skip-latency", "--variants", "context")
    bench(
        tmp_path, "bench.context", "--data", str(locomo), "--skip-latency", "--variants", "context",
        "--datastore", ",".join(PROVIDERS), "--out", str(out),
    )  # fmt: skip
    results = json.loads(out.read_text())
    assert list(results) == PROVIDERS
    stores = {name: r["evidence"]["store"] for name, r in results.items()}
    assert stores["local"]["messages"] == stores["postgres"]["messages"] == stores["pinecone"]["messages"] == 5
    for name, r in results.items():
        ev = r["evidence"]
        assert ev["n_questions"] == 2 and set(ev["variants"]) == {"query", "context"}, name
        # everything fits in 2000 tokens, but the second question's second evidence turn (D1:2, "What breed is
        # Biscuit?") is in the first session's chunk (chunks never span sessions), which shares nothing with the
        # question and is not in its block: 1 and 1/2, the same on every provider
        assert ev["variants"]["context"]["groups"]["all"]["2000"] == 0.75, name
        assert ev["latency_ms"]["query"]["p50"] > 0 and ev["latency_ms"]["context"]["p95"] > 0, name
        assert ev["same_as_local"] == 1.0, name  # the same /query results as the embedded store, question by question
    alone = json.loads((tmp_path / "out" / "context.json").read_text())  # the default: local, as before
    assert alone["evidence"]["variants"] == results["local"]["evidence"]["variants"]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_bench_recall_on_each_provider(tmp_path: Path, locomo: Path, provider: str) -> None:
    bench(tmp_path, "bench.recall", "--data", str(locomo), "--datastore", provider)
    name = "recall" if provider == "local" else f"recall-{provider}"
    results = json.loads((tmp_path / "out" / f"{name}.json").read_text())
    assert results["datastore"] == provider and results["n_questions"] == 2
    assert all(s["counts"]["messages"] == 5 for s in results["stores"].values())
    assert results["variants"]["c"]["groups"]["all"]["recall"]["2000"] == 1.0


@pytest.mark.parametrize("provider", PROVIDERS)
def test_bench_beam_on_each_provider(tmp_path: Path, provider: str) -> None:
    root = write_chat(tmp_path / "beam")
    out = tmp_path / "beam.json"
    bench(tmp_path, "bench.beam", "--data", str(root), "--chats", "3", "--budgets", "250,2000", "--datastore",
          provider, "--out", str(out))  # fmt: skip
    results = json.loads(out.read_text())
    assert results["datastore"] == provider and results["chats"]["3"]["messages"] == 6
    assert results["summary"]["n_questions"] == 2  # the abstention question has no evidence to find
    assert results["summary"]["scores"]["context"]["all"]["2000"] == 1.0
