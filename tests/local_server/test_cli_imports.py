"""CLI commands that only read the store (`stats`, `show`) load no embedding model: no onnxruntime, no torch."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from datastore.memory import Memory
from models.api import Message, RememberRequest
from models.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
PROBE = """
import sys
from local_server.cli import main
sys.argv = ["pyramind", *sys.argv[1:]]
try:
    main()
except SystemExit as exc:
    assert not exc.code, exc.code
heavy = sorted(m for m in ("onnxruntime", "tokenizers", "torch", "sentence_transformers") if m in sys.modules)
print("MODULES:", ",".join(heavy) or "none")
"""


def run_cli(settings: Settings, *args: str) -> str:
    env = {**os.environ, "LOCAL_DB_PATH": str(settings.local_db_path), "COLUMNS": "200"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_stats_and_show_import_no_model(settings: Settings, memory: Memory) -> None:
    messages = [
        Message(id="m1", speaker="Ann", content="We land in Lisbon on 3 June."),
        Message(id="m2", speaker="Bob", content="Book the tram tour for the 4th, please."),
    ]
    chunk_id = memory.writer.remember("default", RememberRequest(conversation_id="trip", messages=messages)).chunk_ids[
        0
    ]
    memory.close()
    stats = run_cli(settings, "stats")
    assert re.search(r'"messages": 2\b', stats) and re.search(r'"L1": 1\b', stats), stats
    assert "MODULES: none" in stats
    shown = run_cli(settings, "show", chunk_id)
    assert "Lisbon" in shown and "MODULES: none" in shown
