"""The one app factory: `create_app(settings)`, used by `server`, `local_server`, the CLI and the tests."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any

from quart import Quart
from quart_schema import HttpSecurityScheme, Info, QuartSchema, Server

from datastore.factory import open_memory
from datastore.indexing.background import Indexer
from datastore.memory import Memory
from models.settings import Settings
from server.auth import install_auth, rate_limit_key
from server.context_routes import context_api
from server.conversations import conversations
from server.errors import install_error_handlers
from server.find_routes import explore
from server.instruction_routes import instructions_api
from server.lifetime import lifetime
from server.mcp_http import mount_mcp
from server.metrics import hook_memory, install_metrics
from server.openapi import GPTActionsOpenAPI
from server.routes import api
from server.ui import install_ui
from server.wellknown import wellknown

log = logging.getLogger(__name__)

TITLE = "Pyramind"
DESCRIPTION = (
    "Long-term memory for LLM chat apps. Remember chat history; recall the most relevant memories at any level "
    "of a tree of chunks (L1) and summaries (L2, L3, ...); expand a summary into what it covers; forget."
)


def create_app(settings: Settings | None = None, memory: Memory | None = None, open_store: bool = True) -> Quart:
    """A Quart app serving the API over the configured store.

    settings: read from the environment when None. memory: an opened Memory to use (tests and the CLI share
    one); when None the app opens one at serving start and closes it at the end, unless `open_store` is False
    (the app then only serves its schema, e.g. to export it). Raises ValueError (a missing
    BEARER_TOKEN) or pydantic.ValidationError (a bad setting) before serving.
    """
    settings = settings or Settings()
    app = Quart(__name__)
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes
    app.config["JSON_SORT_KEYS"] = False
    public_url = settings.public_url or f"http://{settings.host}:{settings.port}"
    schema_kwargs: dict[str, Any] = {
        "info": Info(title=TITLE, version="0.1.0", description=DESCRIPTION),
        "servers": [Server(url=public_url)],
        "redoc_ui_path": None,
        "scalar_ui_path": None,
        "openapi_provider_class": GPTActionsOpenAPI,
    }
    if settings.auth != "none":
        schema_kwargs["security_schemes"] = {"bearerAuth": HttpSecurityScheme(scheme="bearer")}
        schema_kwargs["security"] = [{"bearerAuth": []}]
    QuartSchema(app, **schema_kwargs)
    install_error_handlers(app)
    authenticator = install_auth(app, settings)
    limiter = None
    if settings.rate_limit_per_minute:
        from quart_rate_limiter import RateLimit, RateLimiter

        limiter = RateLimiter(
            app,
            key_function=rate_limit_key,
            default_limits=[RateLimit(settings.rate_limit_per_minute, timedelta(minutes=1))],
        )
    app.register_blueprint(api)
    app.register_blueprint(explore)
    app.register_blueprint(wellknown)
    app.register_blueprint(context_api)
    app.register_blueprint(instructions_api)
    mount_mcp(app, settings, authenticator, limiter)  # MCP over streamable HTTP at /mcp: same auth, limit, store
    app.register_blueprint(conversations)
    install_ui(app)
    app.register_blueprint(lifetime)
    metrics = install_metrics(app) if settings.metrics_enabled else None
    if settings.cors_origins:
        from quart_cors import cors

        app = cors(
            app,
            allow_origin=settings.cors_origins,
            allow_headers=["Authorization", "Content-Type", "Idempotency-Key"],
            allow_methods=["GET", "POST", "PUT", "DELETE", "OPTIONS"],
        )
    if metrics is not None:  # outermost, after mount_mcp: /mcp is measured too
        app.asgi_app = metrics.asgi(app.asgi_app)  # type: ignore[method-assign]
    app.extensions["pyramind.settings"] = settings
    owns_memory = memory is None and open_store
    if memory is not None:
        app.extensions["pyramind.memory"] = memory
        hook_memory(app, memory)

    @app.before_serving
    async def _open_memory() -> None:
        if owns_memory:
            app.extensions["pyramind.memory"] = opened = await asyncio.to_thread(open_memory, settings)
            hook_memory(app, opened)
            # the model's first run and the token encoding now, not on the first requests: /health answers after
            await asyncio.to_thread(opened.warm_up)
        preloading: Memory | None = app.extensions.get("pyramind.memory")
        if preloading is not None:
            # the snapshots of the namespaces used last, read back in the background: /health answers before it ends
            # (INDEX_PRELOAD_SHARE; a request for a namespace not read yet loads it as without a preload)
            preloading.search.indexes.start_preload()

    @app.before_serving
    async def _start_indexer() -> None:
        opened: Memory | None = app.extensions.get("pyramind.memory")
        if opened is not None:  # remember stores and answers; this indexes in the background
            app.extensions["pyramind.indexer"] = indexer = Indexer(
                settings, opened.writer, opened.steps, opened.storage
            )
            await indexer.start()

    @app.after_serving
    async def _close_memory() -> None:
        indexer = app.extensions.pop("pyramind.indexer", None)
        if indexer is not None:
            await indexer.stop()  # no step runs on a closed store
        if owns_memory:
            await asyncio.to_thread(app.extensions.pop("pyramind.memory").close)

    return app
