"""`python -m local_server.main`: the same app as `server`, with local settings (no auth, CORS, port 3333).

For trying Pyramind as a ChatGPT plugin or GPT Action on your own machine; bind stays on 127.0.0.1.
"""

from __future__ import annotations

from models.settings import Settings
from server.main import serve

LOCAL_PORT = 3333
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
CHATGPT_ORIGINS = ["https://chat.openai.com", "https://chatgpt.com"]


def local_settings(base: Settings | None = None, host: str | None = None, port: int | None = None) -> Settings:
    """`base` (or the environment) with auth off, CORS for this server's own page and ChatGPT, on `port` (default
    3333) and `host` (default HOST). The OpenAPI `servers` entry and ai-plugin.json follow that port and host
    (`http://localhost:PORT` on a loopback address), unless PUBLIC_URL is set."""
    base = base or Settings()
    host = host or base.host
    port = port or LOCAL_PORT
    name = "localhost" if host in LOOPBACK else host
    origins = [f"http://localhost:{port}", f"http://127.0.0.1:{port}", *CHATGPT_ORIGINS]
    return base.model_copy(
        update={
            "auth": "none",
            "host": host,
            "port": port,
            "cors_origins": base.cors_origins or origins,
            "public_url": base.public_url or f"http://{name}:{port}",
        }
    )


def start() -> None:
    from server.main import settings_or_exit

    serve(local_settings(settings_or_exit()))


if __name__ == "__main__":
    start()
