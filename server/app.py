"""The one app factory: `create_app(settings)`, used by `server`, `local_server`, the CLI and the tests."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta

import logging

from quart import Quart
from quart_schema import HttpSecurityScheme, Info, OpenAPIProvider, QuartSchema, Server
from quart_schema.openapi import QUART_SCHEMA_OPERATION_ID_ATTRIBUTE

from datastore.datastore import DataStore
from datastore.factory import get_datastore
from models.settings import Settings
from server.auth import install_auth, rate_limit_key
from server.errors import install_error_handlers
from server.lifetime import lifetime
from server.routes import api
from server.wellknown import wellknown

log = logging.getLogger(__name__)

TITLE = "Pyramind"
DESCRIPTION = (
    "Long-term memory for LLM chat apps. Remember chat history; recall the most relevant memories at any level "
    "of a tree of chunks (L1) and summaries (L2, L3, ...); expand a summary into what it covers; forget."
)


class _OpenAPI(OpenAPIProvider):
    """Uses the route's `@operation_id` as given (`remember`, not quart-schema's `post_remember`)."""

    def operation_id(self, method: str, path: str, func: Callable) -> str | None:
        explicit = getattr(func, QUART_SCHEMA_OPERATION_ID_ATTRIBUTE, None)
        return explicit or super().operation_id(method, path, func)


async def _retry_pending(app: Quart, every: float) -> None:
    """Index, every `every` seconds, the messages stored while the embedder was failing."""
    while True:
        await asyncio.sleep(every)
        store = app.extensions.get("pyramind.store")
        if store is None:
            continue
        try:
            await asyncio.to_thread(store.retry_pending_sync)
        except Exception:  # keep retrying; the error is logged, the server keeps serving
            log.exception("retrying pending messages failed")


def create_app(settings: Settings | None = None, store: DataStore | None = None, open_store: bool = True) -> Quart:
    """A Quart app serving the API over the configured DataStore.

    settings: read from the environment when None. store: an opened DataStore to use (tests and the CLI share
    one); when None the app opens one at serving start and closes it at the end, unless `open_store` is False
    (the app then only serves its schema, e.g. to export it). Raises ValueError (a missing
    BEARER_TOKEN) or pydantic.ValidationError (a bad setting) before serving.
    """
    settings = settings or Settings()
    app = Quart(__name__)
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes
    app.config["JSON_SORT_KEYS"] = False
    public_url = settings.public_url or f"http://{settings.host}:{settings.port}"
    schema_kwargs: dict = {
        "info": Info(title=TITLE, version="0.1.0", description=DESCRIPTION),
        "servers": [Server(url=public_url)],
        "redoc_ui_path": None,
        "scalar_ui_path": None,
        "openapi_provider_class": _OpenAPI,
    }
    if settings.auth != "none":
        schema_kwargs["security_schemes"] = {"bearerAuth": HttpSecurityScheme(scheme="bearer")}
        schema_kwargs["security"] = [{"bearerAuth": []}]
    QuartSchema(app, **schema_kwargs)
    install_error_handlers(app)
    install_auth(app, settings)
    if settings.rate_limit_per_minute:
        from quart_rate_limiter import RateLimit, RateLimiter

        RateLimiter(app, key_function=rate_limit_key,
                    default_limits=[RateLimit(settings.rate_limit_per_minute, timedelta(minutes=1))])
    app.register_blueprint(api)
    app.register_blueprint(wellknown)
    app.register_blueprint(lifetime)
    if settings.cors_origins:
        from quart_cors import cors

        app = cors(app, allow_origin=settings.cors_origins, allow_headers=["Authorization", "Content-Type"],
                   allow_methods=["GET", "POST", "DELETE", "OPTIONS"])
    app.extensions["pyramind.settings"] = settings
    owns_store = store is None and open_store
    if store is not None:
        app.extensions["pyramind.store"] = store

    @app.before_serving
    async def _open_store() -> None:
        if owns_store:
            app.extensions["pyramind.store"] = await asyncio.to_thread(get_datastore, settings)
            # load the embedding model now, not on the first request
            await asyncio.to_thread(app.extensions["pyramind.store"].embedder.embed, ["warm up"])

    @app.before_serving
    async def _start_retries() -> None:
        if settings.pending_retry_seconds > 0:
            app.extensions["pyramind.retry"] = asyncio.create_task(_retry_pending(app, settings.pending_retry_seconds))

    @app.after_serving
    async def _close_store() -> None:
        task = app.extensions.pop("pyramind.retry", None)
        if task is not None:
            task.cancel()
        if owns_store:
            app.extensions.pop("pyramind.store").close()

    return app
