"""Serves `.well-known/ai-plugin.json` and `.well-known/openapi.yaml` (public, for GPT Actions and plugins)."""

from __future__ import annotations

from pathlib import Path

from quart import Blueprint, Response, abort, send_file
from quart_schema import hide

WELL_KNOWN_DIR = Path(__file__).resolve().parent.parent / ".well-known"
_FILES = {"ai-plugin.json": "application/json", "openapi.yaml": "text/yaml", "logo.png": "image/png"}

wellknown = Blueprint("wellknown", __name__)


@wellknown.get("/.well-known/<string:name>")
@hide
async def well_known_file(name: str) -> Response:
    if name not in _FILES or not (WELL_KNOWN_DIR / name).is_file():
        abort(404)
    return await send_file(WELL_KNOWN_DIR / name, mimetype=_FILES[name])
