"""`pyramind serve` as an operator runs it: a real process, settings from the environment.

A bad JWT configuration stops the start with one line on stderr naming the setting, before any
model is loaded or any store file is created.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from models.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
NOT_A_KEY = "-----BEGIN PUBLIC KEY-----\nbm90IGEga2V5IGF0IGFsbA==\n-----END PUBLIC KEY-----\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def clean_env(**settings: str) -> dict[str, str]:
    """The caller's environment without any Pyramind setting, plus `settings`."""
    ours = {name.upper() for name in Settings.model_fields}
    env = {k: v for k, v in os.environ.items() if k.upper() not in ours}
    env.update({"PYTHONPATH": str(ROOT), "COLUMNS": "200", **settings})
    return env


def run_serve(
    tmp_path: Path, *args: str, timeout: float = 30, **settings: Any
) -> tuple[subprocess.CompletedProcess[str], float]:
    """`pyramind serve ARGS` in `tmp_path` (no .env there) until it exits; (the result, seconds it took). A server
    still running after `timeout` seconds is a failure (it started when it should not have)."""
    started = time.monotonic()
    try:
        out = subprocess.run(
            [sys.executable, "-m", "local_server.cli", "serve", *args],
            cwd=tmp_path,
            env=clean_env(**settings),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"pyramind serve was still running after {timeout} s: {exc.stderr!r}")
    return out, time.monotonic() - started


@pytest.mark.parametrize(
    ("case", "settings", "named"),
    [
        ("a public key that is not a key", {"JWT_PUBLIC_KEY": "garbage"}, "JWT_PUBLIC_KEY"),
        ("a PEM block that is not a key", {"JWT_PUBLIC_KEY": NOT_A_KEY}, "JWT_PUBLIC_KEY"),
        ("a key path that does not exist", {"JWT_PUBLIC_KEY": "/nonexistent/jwt.pem"}, "JWT_PUBLIC_KEY"),
        ("a JWKS file that does not exist", {"JWT_JWKS_FILE": "/nonexistent/jwks.json"}, "JWT_JWKS_FILE"),
        ("a secret with RS256", {"JWT_SECRET": "x" * 40, "JWT_ALGORITHMS": "RS256"}, "JWT_ALGORITHMS"),
        ("a one-character secret", {"JWT_SECRET": "x"}, "JWT_SECRET"),
        ("an unknown algorithm", {"JWT_SECRET": "x" * 40, "JWT_ALGORITHMS": "HS257"}, "JWT_ALGORITHMS"),
    ],
)
def test_a_bad_jwt_setting_stops_serve_with_one_line(
    tmp_path: Path, case: str, settings: dict[str, str], named: str
) -> None:
    out, seconds = run_serve(tmp_path, "--port", str(free_port()), AUTH="jwt", **dict[str, Any](settings))
    assert out.returncode != 0, (case, out.stdout, out.stderr)
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and named in lines[0], (case, out.stderr)
    assert "Traceback" not in out.stderr and out.stdout == "", (case, out.stdout)
    assert seconds < 30, (case, seconds)  # before any model is loaded
    assert not (tmp_path / "pyramind.db").exists()


def test_a_busy_port_stops_serve_with_one_line_naming_it(tmp_path: Path) -> None:
    """A second server on a port already listened on printed a 106-line traceback, after loading the model."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out, seconds = run_serve(tmp_path, "--port", str(port), BEARER_TOKEN="t" * 32)
    assert out.returncode == 1, (out.stdout, out.stderr)
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and f"port {port}" in lines[0] and "in use" in lines[0], out.stderr
    assert "Traceback" not in out.stderr
    assert seconds < 30  # before the model is loaded
    assert not (tmp_path / "pyramind.db").exists()  # nor the store opened


@contextmanager
def serving(tmp_path: Path, *args: str, **settings: str) -> Iterator[tuple[str, Path]]:
    """`pyramind serve ARGS` running in `tmp_path` until /health answers; yields (its URL, its output file).
    The process is stopped (SIGTERM, then SIGKILL) on the way out."""
    port = free_port()
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        command = [sys.executable, "-m", "local_server.cli", "serve", *args, "--port", str(port)]
        proc = subprocess.Popen(
            command,
            cwd=tmp_path,
            env=clean_env(**settings),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        yield url, log
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_local_serve_on_another_port_advertises_that_port(tmp_path: Path) -> None:
    """`serve --local --port N` used to advertise port 3333 in /openapi.json and ai-plugin.json."""
    with serving(tmp_path, "--local") as (url, _log):
        port = url.rsplit(":", 1)[1]
        doc = httpx.get(f"{url}/openapi.json", timeout=10).json()
        assert doc["servers"] == [{"url": f"http://localhost:{port}"}]
        plugin = httpx.get(f"{url}/.well-known/ai-plugin.json", timeout=10).json()
        assert plugin["api"]["url"] == f"http://localhost:{port}/.well-known/openapi.yaml"
        assert plugin["logo_url"].startswith(f"http://localhost:{port}/")
        r = httpx.options(
            f"{url}/query",
            headers={"Origin": f"http://localhost:{port}", "Access-Control-Request-Method": "POST"},
            timeout=10,
        )
        assert r.headers.get("Access-Control-Allow-Origin") == f"http://localhost:{port}"


def test_serve_says_running_on_once(tmp_path: Path) -> None:
    """Hypercorn's "Running on" line was printed twice (its own handler, then again through the
    root logger the CLI configures); the store line comes first, with the file's absolute path."""
    with serving(tmp_path, BEARER_TOKEN="t" * 32) as (url, log):
        assert httpx.get(f"{url}/health", timeout=10).status_code == 200
    lines = log.read_text().splitlines()
    assert sum("Running on" in line for line in lines) == 1, lines
    assert f"pyramind: store: local SQLite file {tmp_path / 'pyramind.db'}" in lines, lines
