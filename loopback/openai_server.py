"""A loopback stand-in for an OpenAI-compatible server: OpenAI is unreachable from here, so benchmarks and tests
talk to this over real HTTP, in the real wire format (`/v1/embeddings`, `/v1/chat/completions`).

`LoopbackOpenAI(delay=2.0)` answers each chat completion after `delay` seconds (a slow LLM), embeddings at once
(deterministic vectors from a hash of the text, not normalised); it can fail the next N requests with a 500
(`fail_next`), checks the API key, records every request (`requests`) and the most chat completions it held at
once (`peak_concurrent`). A chat completion's content is `SUMMARY of <n> chars`, or what `chat_reply(request body)`
returns when it is set (a JSON answer, or garbage, for the instruction detector's tests). Use it as a context
manager; it serves from a thread on 127.0.0.1, a free port.

    with LoopbackOpenAI(delay=2.0) as llm:
        settings = Settings(openai_api_key=llm.api_key, openai_base_url=llm.base_url, ...)
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType

import numpy as np


class LoopbackOpenAI(ThreadingHTTPServer):
    """The server; see the module docstring. `base_url` ends in /v1, as OpenAI's SDK expects."""

    daemon_threads = True

    def __init__(self, delay: float = 0.0, api_key: str = "sk-test") -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.delay = delay
        self.api_key = api_key
        self.fail_next = 0
        self.chat_reply: Callable[[dict], str] | None = None
        self.requests: list[tuple[str, dict]] = []
        self.completions = 0
        self.in_flight = 0
        self.peak_concurrent = 0
        self._guard = threading.Lock()
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_port}/v1"

    def start(self) -> LoopbackOpenAI:
        self._thread = threading.Thread(target=self.serve_forever, name="loopback-openai", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()

    def __enter__(self) -> LoopbackOpenAI:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class _Handler(BaseHTTPRequestHandler):
    server: LoopbackOpenAI
    protocol_version = "HTTP/1.1"  # keep-alive, as OpenAI's SDK (httpx) uses it

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        srv = self.server
        with srv._guard:
            srv.requests.append((self.path, body))
            fail = srv.fail_next > 0
            if fail:
                srv.fail_next -= 1
        if fail:
            return self._send(500, {"error": {"message": "boom", "type": "server_error", "code": None}})
        if self.headers.get("Authorization") != f"Bearer {srv.api_key}":
            return self._send(401, {"error": {"message": "bad key", "type": "invalid_request_error"}})
        if self.path == "/v1/embeddings":
            dim = body.get("dimensions", 1536)
            data = []
            for i, text in enumerate(body["input"]):
                seed = int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)
                vec = np.random.default_rng(seed).normal(size=dim) * 3  # not normalised: the client must do it
                data.append({"object": "embedding", "index": i, "embedding": vec.tolist()})
            return self._send(
                200,
                {
                    "object": "list",
                    "data": data[::-1],
                    "model": body["model"],
                    "usage": {"prompt_tokens": 1, "total_tokens": 1},
                },
            )
        if self.path == "/v1/chat/completions":
            with srv._guard:
                srv.in_flight += 1
                srv.peak_concurrent = max(srv.peak_concurrent, srv.in_flight)
            try:
                time.sleep(srv.delay)
            finally:
                with srv._guard:
                    srv.in_flight -= 1
                    srv.completions += 1
            user = body["messages"][-1]["content"]
            content = srv.chat_reply(body) if srv.chat_reply else f"SUMMARY of {len(user)} chars"
            return self._send(
                200,
                {
                    "id": "chatcmpl-1",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body["model"],
                    "choices": [
                        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}
                    ],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                },
            )
        self._send(404, {"error": {"message": "no route"}})

    def _send(self, status: int, payload: dict) -> None:
        raw = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)
