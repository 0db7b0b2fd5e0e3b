"""`.well-known/openapi.yaml` and `.well-known/ai-plugin.json`, generated from the running app and its settings.

Public (GPT Actions and plugin clients fetch them before they have a token). The YAML is the very document
`/openapi.json` serves (server/openapi.py); the manifest points at it under PUBLIC_URL and declares the auth in
force (`none` for the local server, bearer otherwise). Only the logo is a file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from quart import Blueprint, Response, abort, current_app, send_file
from quart_schema import hide

from models.settings import Settings

WELL_KNOWN_DIR = Path(__file__).resolve().parent.parent / ".well-known"

NAME_FOR_HUMAN = "Pyramind Memory"
DESCRIPTION_FOR_HUMAN = "Long-term memory for your chats: remember conversations, recall what matters."
DESCRIPTION_FOR_MODEL = (
    "Long-term memory of the user's conversations. Call remember with new chat messages to store them. At the start "
    "of a chat call context for one token-budgeted block: core memory (lasting facts, kept with core_put), recent "
    "turns, relevant memories and a summary of the rest. Call query with a natural-language question to recall "
    "the most relevant memories; by default it returns level 1 chunks (verbatim excerpts of the conversation), each "
    "with the parent_id of the summary above it; mode dense or filter.min_level 2 also return summaries (level 2 "
    "and above). Expand a summary with get_memory to read the chunks it covers. Use find for exact words, names or "
    "numbers. Call delete only when the user asks to forget something. Quote level 1 chunks when answering factual "
    "questions; mention dates from start_time/end_time when relevant."
)
LEGAL_PATH = "/legal"

wellknown = Blueprint("wellknown", __name__)


def public_url(settings: Settings) -> str:
    """Where clients reach the server: PUBLIC_URL, else http://HOST:PORT (no trailing slash)."""
    return (settings.public_url or f"http://{settings.host}:{settings.port}").rstrip("/")


def plugin_manifest(settings: Settings) -> dict[str, Any]:
    """The ai-plugin.json manifest for these settings."""
    base = public_url(settings)
    auth = {"type": "none"} if settings.auth == "none" else {"type": "user_http", "authorization_type": "bearer"}
    return {
        "schema_version": "v1",
        "name_for_human": NAME_FOR_HUMAN,
        "name_for_model": "pyramind",
        "description_for_human": DESCRIPTION_FOR_HUMAN,
        "description_for_model": DESCRIPTION_FOR_MODEL,
        "auth": auth,
        "api": {"type": "openapi", "url": f"{base}/.well-known/openapi.yaml"},
        "logo_url": f"{base}/.well-known/logo.png",
        "contact_email": "hello@pyramind.dev",
        "legal_info_url": f"{base}{LEGAL_PATH}",
    }


@wellknown.get("/.well-known/openapi.yaml")
@hide
async def openapi_yaml() -> Response:
    """The OpenAPI document of /openapi.json, as YAML."""
    doc = current_app.extensions["QUART_SCHEMA"].openapi_provider.schema()
    text = yaml.safe_dump(json.loads(json.dumps(doc)), sort_keys=False, allow_unicode=True)
    return Response(text, mimetype="text/yaml")


@wellknown.get("/.well-known/ai-plugin.json")
@hide
async def ai_plugin() -> Response:
    """The plugin manifest, from the settings."""
    return Response(
        json.dumps(plugin_manifest(current_app.extensions["pyramind.settings"]), indent=2), mimetype="application/json"
    )


def legal_text(settings: Settings) -> str:
    """What the legal page says: who runs this server, where memories go, how to remove them."""
    embedder, summariser = settings.resolved_embedder, settings.resolved_summariser
    remote = [
        what for what, used in (("embeddings", embedder == "openai"), ("summaries", summariser == "openai")) if used
    ]
    where = (
        f"Text is also sent to {settings.openai_base_url or 'the OpenAI API'} for its {' and '.join(remote)}."
        if remote
        else "Embeddings and summaries are computed on this server; no text is sent elsewhere."
    )
    return (
        f"{NAME_FOR_HUMAN}: legal information\n\n"
        "This server runs Pyramind, open-source memory software. It is operated by whoever runs it, not by the "
        "Pyramind project; ask them for their terms and privacy policy.\n\n"
        f"What a connected assistant remembers is stored by this server ({settings.resolved_datastore} store) "
        f"and recalled for the same caller. {where}\n\n"
        "Ask the assistant to forget something (DELETE /delete) and it is removed from every level of memory.\n"
    )


@wellknown.get(LEGAL_PATH)
@hide
async def legal() -> Response:
    """The legal page ai-plugin.json's legal_info_url points at; public, like the manifest."""
    return Response(legal_text(current_app.extensions["pyramind.settings"]), mimetype="text/plain")


@wellknown.get("/.well-known/logo.png")
@wellknown.get("/favicon.ico")
@hide
async def logo() -> Response:
    """The logo (also the browser's /favicon.ico, a PNG, which browsers take); public."""
    path = WELL_KNOWN_DIR / "logo.png"
    if not path.is_file():
        abort(404)
    return await send_file(path, mimetype="image/png")
