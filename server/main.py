"""`python -m server.main`: serve the API with hypercorn, settings from the environment."""

from __future__ import annotations

import asyncio

from models.settings import Settings


def serve(settings: Settings) -> None:
    """Run the app on settings.host:settings.port until interrupted."""
    from hypercorn.asyncio import serve as hypercorn_serve
    from hypercorn.config import Config

    from server.app import create_app

    app = create_app(settings)
    config = Config()
    config.bind = [f"{settings.host}:{settings.port}"]
    config.accesslog = "-"
    asyncio.run(hypercorn_serve(app, config))  # type: ignore[arg-type]


def start() -> None:
    serve(Settings())


if __name__ == "__main__":
    start()
