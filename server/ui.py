"""The web memory browser at /ui and Swagger UI's assets, all served from the package (no CDN).

`/ui/` is static files (`server/ui_static/`: HTML, CSS and JavaScript modules, no build step) that call the public
API with the caller's token, entered on the page and kept in the tab's sessionStorage. The page itself needs no
token, so these paths are public (server/auth.py). Swagger UI (/docs, rendered by quart-schema) loads its script
and stylesheet from `/ui/swagger/`, which serves them from the `openapi-ui-bundles` package (Swagger UI 5.x, which
renders OpenAPI 3.1), so the docs work offline too.
"""

from __future__ import annotations

from pathlib import Path

from openapi_ui_bundles import swagger_ui
from quart import Blueprint, Quart, Response, redirect, send_from_directory
from quart_schema import hide
from werkzeug.exceptions import NotFound

STATIC = Path(__file__).parent / "ui_static"
SWAGGER_FILES = frozenset({"swagger-ui-bundle.js", "swagger-ui.css"})

ui = Blueprint("ui", __name__)  # not API operations: hidden from the OpenAPI document


@ui.get("/ui")
@hide
async def ui_root() -> Response:
    """The page lives at /ui/ so that its relative links (assets, API) resolve under it."""
    return redirect("/ui/", 308)  # type: ignore[return-value]


@ui.get("/ui/")
@hide
async def ui_index() -> Response:
    """The single page: sign in with a token, browse conversations and their trees, search, delete."""
    resp = await send_from_directory(STATIC, "index.html")
    resp.headers["Cache-Control"] = "no-cache"
    return resp


@ui.get("/ui/swagger/<string:filename>")
@hide
async def swagger_asset(filename: str) -> Response:
    """Swagger UI's script and stylesheet from the openapi-ui-bundles package; 404 for anything else."""
    if filename not in SWAGGER_FILES:
        raise NotFound()
    resp = await send_from_directory(swagger_ui.static_path, filename)
    resp.headers["Cache-Control"] = "public, max-age=86400"
    return resp


@ui.get("/ui/<path:filename>")
@hide
async def ui_asset(filename: str) -> Response:
    """A static file of the page (send_from_directory refuses paths outside the folder: 404)."""
    resp = await send_from_directory(STATIC, filename)
    resp.headers["Cache-Control"] = "no-cache"
    resp.headers["X-Content-Type-Options"] = "nosniff"
    return resp


def install_ui(app: Quart) -> None:
    """Register the page and point Swagger UI (/docs) at the packaged assets instead of quart-schema's CDN."""
    app.config["QUART_SCHEMA_SWAGGER_JS_URL"] = "/ui/swagger/swagger-ui-bundle.js"
    app.config["QUART_SCHEMA_SWAGGER_CSS_URL"] = "/ui/swagger/swagger-ui.css"
    app.register_blueprint(ui)
