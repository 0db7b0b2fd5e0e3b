"""What the benchmarks share: their stores (on the provider `--datastore` names), LoCoMo ingestion, the machine's
description, RESULTS.md sections.

Every benchmark opens its stores through `bench_settings` and `open_store`; inside `datastore(name)` they are
stores of that provider: `local` (SQLite files under OUT), `postgres` (a PostgreSQL 16 + pgvector started here
from the pgserver wheel, as the tests start it: loopback/servers.py) or `pinecone` (the needledb Pinecone
emulator started here), stopped when the block ends. OUT is bench/out, or the folder in $BENCH_OUT (the smoke
tests run the benchmarks on tiny data there).
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
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
OUT = Path(os.environ["BENCH_OUT"]) if os.environ.get("BENCH_OUT") else ROOT / "bench" / "out"
RESULTS = ROOT / "bench" / "RESULTS.md"
DATASTORES = ("local", "postgres", "pinecone")
_PROVIDER: dict[str, object] = {"datastore": "local"}  # the settings `datastore(name)` puts in every store's


@contextmanager
def datastore(name: str) -> Iterator[None]:
    """Inside, `bench_settings` makes stores of provider `name` (one of DATASTORES): for postgres a PostgreSQL
    cluster, for pinecone a needledb emulator is started first and stopped (its files removed) at the end."""
    from loopback.servers import Needle, Postgres

    if name not in DATASTORES:
        raise ValueError(f"--datastore must be one of {', '.join(DATASTORES)}, not {name!r}")
    server: Postgres | Needle | None = None
    previous = dict(_PROVIDER)
    try:
        if name == "postgres":
            pg = server = Postgres().start()
            _PROVIDER.update(datastore="postgres", postgres_url=pg.create_database())
        elif name == "pinecone":
            needle = server = Needle().start()
            _PROVIDER.update(datastore="pinecone", pinecone_api_key="bench", pinecone_host=needle.host)
        yield
    finally:
        _PROVIDER.clear()
        _PROVIDER.update(previous)
        if server is not None:
            server.stop()


def provider_env() -> dict[str, str]:
    """The settings of the enclosing `datastore` block as environment variables (for a server process):
    {"DATASTORE": ..., "POSTGRES_URL": ...} or the Pinecone ones; secrets in clear."""
    out = {}
    for key, value in _PROVIDER.items():
        secret = getattr(value, "get_secret_value", None)
        out[key.upper()] = str(secret() if secret is not None else value)
    return out


def datastore_argument(parser: argparse.ArgumentParser, several: bool = False) -> None:
    """Add `--datastore` (default local); with `several`, a comma-separated list of providers, run in turn."""
    names = "|".join(DATASTORES)
    parser.add_argument(
        "--datastore",
        default="local",
        help=f"{names}, or several comma-separated (one table)" if several else names,
        type=(lambda v: [_provider(p) for p in v.split(",")]) if several else _provider,
    )


def _provider(name: str) -> str:
    if name.strip() not in DATASTORES:
        raise argparse.ArgumentTypeError(f"one of {', '.join(DATASTORES)}, not {name!r}")
    return name.strip()


def bench_settings(db: Path, **overrides: object) -> Settings:
    """Settings for a benchmark store at `db` (a SQLite file; unused by the other providers) on the provider of
    the enclosing `datastore` block (local outside one); nothing read from .env."""
    return Settings(_env_file=None, local_db_path=db, **{**_PROVIDER, **overrides})  # type: ignore[arg-type]


def open_store(settings: Settings, embedder: Embedder, summariser: Summariser | None = None) -> Memory:
    """A fresh, empty store: the SQLite file at settings.local_db_path (and its WAL files) removed first, or every
    namespace of the PostgreSQL database or Pinecone index deleted once it is open."""
    if settings.resolved_datastore == "local":
        for suffix in ("", "-wal", "-shm"):
            Path(f"{settings.local_db_path}{suffix}").unlink(missing_ok=True)
    memory = open_memory(settings, embedder, summariser or ExtractiveSummariser())
    if settings.resolved_datastore != "local":
        for ns in memory.storage.list_namespaces():
            memory.storage.delete_namespace(ns)
    return memory


def ingest(memory: Memory, samples: list[dict], ns: str = "bench", captions: bool = False) -> int:
    """Remember each sample as its own conversation (id = sample_id), one session per call, in time order.

    captions: image captions in the content (see dataset.turn_text). Returns the number of messages remembered.
    """
    n = 0
    for sample in samples:
        for session in dataset.sessions(sample, captions):
            memory.writer.remember(ns, RememberRequest(conversation_id=sample["sample_id"], messages=session))
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
