"""What the trust tests share: a real `python -m server.main` process on loopback, and a whole-store check.

`ServerProcess` starts the server in its own session with settings from the environment (as an operator would),
waits for /health, and is always stopped by its owner (`kill` = SIGKILL, `stop` = SIGTERM then SIGKILL).
`check_store` opens the SQLite file directly and asserts, for every namespace and source, the tree invariants
(`tests.support.invariants.check_tree`) and that messages and L1 chunks agree.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from datastore.factory import open_memory
from datastore.memory import Memory
from models.settings import Settings
from services.embedding import Embedder
from services.summarising import ExtractiveSummariser
from tests.support.invariants import check_tree
from tests.support.settings import TOKEN
from tests.support.stores import local_storage

ROOT = Path(__file__).resolve().parents[2]
AUTH = {"Authorization": f"Bearer {TOKEN}"}
START_TIMEOUT = 120.0  # loading torch and the model on 2 busy cores can take a while


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """`python -m server.main` bound to 127.0.0.1 on a free port, over the SQLite file `db`.

    env: extra settings (CHUNK_SIZE=..., FAN_OUT=...). The log (hypercorn's access log included) goes to `log`.
    """

    def __init__(self, db: Path, log: Path, env: dict[str, str] | None = None) -> None:
        self.db, self.log = db, log
        self.extra = dict(env or {})
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = START_TIMEOUT) -> ServerProcess:
        """Start and wait until /health answers 200; raises RuntimeError (with the log's tail) otherwise."""
        self.port = free_port()
        ours = {name.upper() for name in Settings.model_fields}  # no setting leaks in from the caller's env
        env = {k: v for k, v in os.environ.items() if k.upper() not in ours}
        env.update(
            {
                "LOCAL_DB_PATH": str(self.db),
                "BEARER_TOKEN": TOKEN,
                "HOST": "127.0.0.1",
                "PORT": str(self.port),
                "EMBED_THREADS": "1",
                "DATASTORE": "local",
                "EMBEDDER": "local",
                "SUMMARISER": "extractive",
                "HF_HUB_OFFLINE": "1",
                "TOKENIZERS_PARALLELISM": "false",
                "OMP_NUM_THREADS": "1",
            }
        )
        env.update(self.extra)
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "server.main"],
                cwd=self.db.parent,
                env={**env, "PYTHONPATH": str(ROOT)},
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited ({self.proc.returncode}):\n{self.log_tail()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"server not healthy after {timeout:.0f} s:\n{self.log_tail()}")
            time.sleep(0.2)

    def kill(self) -> None:
        """SIGKILL the process (its whole session) and reap it; a no-op when it is not running."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(30)
        self.proc = None

    def stop(self, grace: float = 15.0) -> None:
        """SIGTERM, then SIGKILL after `grace` seconds."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                pass
        self.kill()

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log.read_text(errors="replace")[-n:]
        except OSError:
            return ""


def store_settings(db: Path, env: dict[str, str] | None = None) -> Settings:
    """The settings a ServerProcess with this `env` runs under (nothing read from the environment or .env)."""
    values: dict[str, object] = {"local_db_path": db, "bearer_token": TOKEN}
    values.update({k.lower(): v for k, v in (env or {}).items()})
    return Settings(_env_file=None, **values)  # type: ignore[arg-type]


def open_store(settings: Settings, embedder: Embedder) -> Memory:
    return open_memory(settings, embedder, ExtractiveSummariser())


def check_store(memory: Memory, settings: Settings, indexed: bool = True) -> dict[str, dict[str, str]]:
    """Assert every invariant of every source of every namespace; returns {ns: {message id: source id}}.

    indexed=False: a store the background indexer has not caught up with (after a crash): messages past the
    last chunk and complete groups without their summary are allowed; everything that is there must be whole.

    Per source: the tree invariants; messages have seq 0..n-1, the counters of the source row, contiguous token
    offsets; every L1 chunk names only stored messages, in seq order without gaps; every message is covered by
    at least one chunk, and the chunks covering a message are consecutive; summaries carry no message ids of
    their own but their subtrees are whole (check_tree). The SQLite file passes `PRAGMA integrity_check`.
    """
    db = local_storage(memory).db.reader
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert (
        db.execute(
            "SELECT COUNT(*) FROM nodes WHERE namespace NOT IN (SELECT namespace FROM sources) "
            "OR source_id NOT IN (SELECT source_id FROM sources)"
        ).fetchone()[0]
        == 0
    ), "orphan nodes"
    assert (
        db.execute(
            "SELECT COUNT(*) FROM messages m WHERE NOT EXISTS (SELECT 1 FROM sources s WHERE "
            "s.namespace = m.namespace AND s.source_id = m.source_id)"
        ).fetchone()[0]
        == 0
    ), "orphan messages"
    out: dict[str, dict[str, str]] = {}
    for ns in memory.storage.list_namespaces():
        seen: dict[str, str] = {}
        for sid in memory.storage.list_sources(ns):
            src = memory.storage.get_source(ns, sid)
            assert src is not None
            messages = memory.storage.messages(ns, sid, 0)
            ids = [m.id for m in messages]
            assert len(ids) == len(set(ids)), f"{sid}: duplicate messages"
            assert [m.seq for m in messages] == list(range(len(messages))), f"{sid}: seq has gaps"
            assert src.n_messages == len(messages) and src.max_seq == len(messages) - 1, f"{sid}: counters"
            offset = 0
            for m in messages:
                assert m.tok_offset == offset, f"{sid}: token offsets of {m.id} not contiguous"
                offset += m.n_tokens
            assert src.n_tokens == offset, f"{sid}: n_tokens {src.n_tokens} != {offset}"
            nodes = memory.storage.source_nodes(ns, sid)
            check_tree(
                nodes,
                settings.chunk_size,
                settings.chunk_overlap,
                settings.fan_out,
                settings.max_level,
                rolled_up=indexed,
            )
            seq_of = {m.id: m.seq for m in messages}
            covered: dict[str, list[int]] = {}
            chunks = sorted((n for n in nodes if n.level == 1), key=lambda n: n.position)
            for c in chunks:
                assert c.message_ids, f"{c.id} covers no message"
                unknown = [i for i in c.message_ids if i not in seq_of]
                assert not unknown, f"{c.id} names messages that are not stored: {unknown}"
                seqs = [seq_of[i] for i in c.message_ids]
                assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), f"{c.id}: messages not contiguous"
                assert c.tok_end <= offset, f"{c.id} ends past the stream"
                for i in c.message_ids:
                    covered.setdefault(i, []).append(c.position)
            for n in nodes:
                if n.level > 1:
                    assert not n.message_ids
            chunked_to = max((c.tok_end for c in chunks), default=0)
            missing = [m.id for m in messages if m.id not in covered and (indexed or m.tok_offset < chunked_to)]
            assert not missing, f"{sid}: messages in no chunk: {missing[:5]}"
            for mid, positions in covered.items():
                assert positions == list(range(positions[0], positions[0] + len(positions))), (
                    f"{mid} is covered by chunks {positions}, not consecutive"
                )
            if chunks and indexed:
                assert chunks[-1].tok_end == offset, f"{sid}: the last chunk does not reach the end of the stream"
            for mid in ids:
                seen[mid] = sid
        out[ns] = seen
    return out
