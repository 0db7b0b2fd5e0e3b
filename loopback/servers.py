"""Real services on loopback, for the provider tests and `bench.speed --postgres` (outside bench/ and tests/, since
neither imports the other): PostgreSQL 16 + pgvector (from the `pgserver` wheel) and the needledb Pinecone emulator.
Each starts on a free port in a fresh folder under /tmp and is stopped (and
its folder removed) by `stop()`; nothing is left running.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

PG_USER = "pyramind"  # PostgreSQL refuses to run as root: when we are root, initdb/pg_ctl run as this user


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Postgres:
    """A throwaway PostgreSQL 16 cluster with pgvector, trust auth, bound to 127.0.0.1:`port`."""

    def __init__(self) -> None:
        spec = importlib.util.find_spec("pgserver")  # its binaries only: importing it registers atexit hooks
        if spec is None or not spec.submodule_search_locations:
            raise RuntimeError("the pgserver wheel is not installed (pip install -e '.[dev]')")
        self.bin = Path(spec.submodule_search_locations[0]) / "pginstall" / "bin"
        self.root = Path(tempfile.mkdtemp(prefix="pyramind-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        self.user: str | None = None
        if os.geteuid() == 0:
            self.user = PG_USER
            try:
                pwd.getpwnam(PG_USER)
            except KeyError:
                subprocess.run(
                    ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", PG_USER],
                    check=True,
                    capture_output=True,
                )
            shutil.chown(self.root, PG_USER)
            # that user may not reach the wheel's binaries (a clone under a root-only folder): run a copy
            # inside our own folder, laid out as in site-packages (the binaries' RPATH is
            # $ORIGIN/../../../pgserver.libs; PostgreSQL finds lib/ and share/ relative to bin/)
            site = self.bin.parents[2]
            shutil.copytree(site / "pgserver" / "pginstall", self.root / "pgserver" / "pginstall", symlinks=True)
            shutil.copytree(site / "pgserver.libs", self.root / "pgserver.libs", symlinks=True)
            self.bin = self.root / "pgserver" / "pginstall" / "bin"

    def _run(self, *args: str) -> None:
        done = subprocess.run(
            [str(self.bin / args[0]), *args[1:]], user=self.user, capture_output=True, text=True, timeout=120
        )
        if done.returncode != 0:
            raise RuntimeError(f"{args[0]} failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}")

    def start(self) -> Postgres:
        """initdb, start (fsync off: test data), and put `vector` in template1 so every new database has it.
        On any failure what was started is stopped and the folder removed before the error propagates."""
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> Postgres:
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.root / "log"),
            "-w",
            "-t",
            "60",
            "-o",
            f"-h 127.0.0.1 -p {self.port} -k {self.root} -F",
            "start",
        )
        import psycopg

        with psycopg.connect(self.url("template1"), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        return self

    def url(self, db: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{db}"

    def create_database(self) -> str:
        """A fresh database (with pgvector); its URL."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def drop_database(self, url: str) -> None:
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{url.rsplit("/", 1)[1]}" WITH (FORCE)')

    def stop(self) -> None:
        """pg_ctl stop (fast); if that fails, SIGKILL the postmaster we started. Then remove the folder."""
        pid_file = self.data / "postmaster.pid"
        pid = int(pid_file.read_text().split()[0]) if pid_file.exists() else None
        try:
            self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", "30", "stop")
        except (RuntimeError, subprocess.TimeoutExpired):
            if pid is not None:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        shutil.rmtree(self.root, ignore_errors=True)


class Needle:
    """needledb serving the Pinecone data-plane API on 127.0.0.1:`port`, auth off (loopback only), with one
    cosine index `name` of `dimension`; `host` is what `Pinecone(...).Index(host=...)` takes."""

    def __init__(self, name: str = "pyramind", dimension: int = 384) -> None:
        self.name, self.dimension = name, dimension
        self.root = Path(tempfile.mkdtemp(prefix="pyramind-needle-"))
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.host = f"{self.base}/indexes/{name}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Needle:
        """Serve, wait for /health (60 s), create the index; on failure stop what was started, then raise."""
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> Needle:
        log = open(self.root / "log", "wb")  # noqa: SIM115 (closed with the process)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "needledb",
                "serve",
                "--no-auth",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--data",
                str(self.root / "data"),
                "--log-level",
                "warning",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"needledb exited ({self.proc.returncode}): {(self.root / 'log').read_text()}")
            try:
                with urllib.request.urlopen(f"{self.base}/health", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"needledb not up after 60 s: {(self.root / 'log').read_text()}") from None
                time.sleep(0.2)
        body = json.dumps({"name": self.name, "dimension": self.dimension, "metric": "cosine"}).encode()
        req = urllib.request.Request(f"{self.base}/indexes", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10):
            pass
        return self

    def stop(self) -> None:
        """SIGTERM the server we started (SIGKILL after 10 s), then remove its folder."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        shutil.rmtree(self.root, ignore_errors=True)
