"""What both benchmarks share: stores over LoCoMo, the machine's description, RESULTS.md sections."""

from __future__ import annotations

import os
import platform
import re
import subprocess
from datetime import UTC, datetime
from pathlib import Path

from bench import dataset
from datastore.factory import open_memory
from datastore.memory import Memory
from models.api import RememberRequest
from models.settings import Settings
from services.embedding import Embedder
from services.summarising import ExtractiveSummariser, Summariser

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out"
RESULTS = ROOT / "bench" / "RESULTS.md"


def bench_settings(db: Path, **overrides: object) -> Settings:
    """Settings for a benchmark store at `db` (nothing read from the environment or .env)."""
    return Settings(_env_file=None, local_db_path=db, **overrides)  # type: ignore[arg-type]


def open_store(settings: Settings, embedder: Embedder, summariser: Summariser | None = None) -> Memory:
    """A fresh local store: the file at settings.local_db_path (and its WAL files) is removed first."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{settings.local_db_path}{suffix}").unlink(missing_ok=True)
    return open_memory(settings, embedder, summariser or ExtractiveSummariser())


def ingest(store: Memory, samples: list[dict], ns: str = "bench", captions: bool = False) -> int:
    """Remember each sample as its own conversation (id = sample_id), one session per call, in time order.

    captions: image captions in the content (see dataset.turn_text). Returns the number of messages remembered.
    """
    n = 0
    for sample in samples:
        for session in dataset.sessions(sample, captions):
            store.writer.remember(ns, RememberRequest(conversation_id=sample["sample_id"], messages=session))
            n += len(session)
    return n


def machine() -> str:
    """'<cores> cores, <CPU model>, <RAM> GiB RAM, Python x.y.z' from /proc."""
    cpu = "unknown CPU"
    try:
        m = re.search(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.M)
        cpu = m.group(1).strip() if m else cpu
        mem = re.search(r"^MemTotal:\s*(\d+)", Path("/proc/meminfo").read_text(), re.M)
        ram = f", {int(mem.group(1)) / 2**20:.0f} GiB RAM" if mem else ""
    except OSError:
        ram = ""
    return f"{os.cpu_count()} cores, {cpu}{ram}, Python {platform.python_version()}"


def commit() -> str:
    """The short git commit of the working tree (read-only `git rev-parse`), or 'unknown'."""
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def header(command: str) -> str:
    """The provenance lines every results section starts with."""
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (
        f"- date: {now}\n- machine: {machine()}\n- commit: `{commit()}` (plus uncommitted changes, if any)\n"
        f"- command: `{command}`\n"
    )


def write_section(name: str, body: str, path: Path = RESULTS) -> None:
    """Replace (or append) the section between `<!-- name:start -->` and `<!-- name:end -->` of RESULTS.md."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    text = path.read_text() if path.exists() else "# Benchmark results\n\n"
    block = f"{start}\n{body.rstrip()}\n{end}"
    if start in text and end in text:
        text = text[: text.index(start)] + block + text[text.index(end) + len(end) :]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    path.write_text(text)
