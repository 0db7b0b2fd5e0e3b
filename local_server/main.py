"""`python -m pyramind.local_server.main`: the same app as `server`, with local settings (no auth, CORS, port 3333).

For trying Pyramind as a ChatGPT plugin or GPT Action on your own machine; bind stays on 127.0.0.1.
"""

from __future__ import annotations

from pyramind.models.settings import Settings
from pyramind.server.main import serve

LOCAL_PORT = 3333
LOCAL_ORIGINS = ["http://localhost:3333", "http://127.0.0.1:3333", "https://chat.openai.com", "https://chatgpt.com"]


def local_settings(base: Settings | None = None) -> Settings:
    """`base` (or the environment) with auth off, CORS for localhost and ChatGPT, and port 3333."""
    base = base or Settings()
    return base.model_copy(
        update={
            "auth": "none",
            "port": LOCAL_PORT,
            "cors_origins": base.cors_origins or LOCAL_ORIGINS,
            "public_url": base.public_url or f"http://localhost:{LOCAL_PORT}",
        }
    )


def start() -> None:
    from pyramind.server.main import settings_or_exit

    serve(local_settings(settings_or_exit()))


if __name__ == "__main__":
    start()
