"""The local server is the same app with local settings; the schema documents the auth in force.

(The GPT Actions document and the generated .well-known files are checked in test_gpt_actions.py.)
"""

from __future__ import annotations

from pathlib import Path

from local_server.main import LOCAL_PORT, local_settings
from server.app import create_app
from tests.support.settings import make_settings

ROOT = Path(__file__).resolve().parents[2]


async def running_schema(settings) -> dict:
    app = create_app(settings, open_store=False)
    async with app.test_app() as test_app:
        return await (await test_app.test_client().get("/openapi.json")).get_json()


async def test_bearer_app_documents_its_security_and_local_app_is_open(tmp_path: Path) -> None:
    secured = await running_schema(make_settings(tmp_path))
    assert secured["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
    local = local_settings(make_settings(tmp_path))
    assert local.auth == "none" and local.port == LOCAL_PORT
    app = create_app(local, open_store=False)
    async with app.test_app() as test_app:
        r = await test_app.test_client().options(
            "/query", headers={"Origin": "https://chat.openai.com", "Access-Control-Request-Method": "POST"}
        )
        assert r.headers.get("Access-Control-Allow-Origin") == "https://chat.openai.com"
        r = await test_app.test_client().get("/openapi.json", headers={"Origin": "https://evil.example"})
        assert r.headers.get("Access-Control-Allow-Origin") is None


def test_missing_bearer_token_refuses_to_build(tmp_path: Path) -> None:
    import pytest

    with pytest.raises(ValueError, match="BEARER_TOKEN"):
        create_app(make_settings(tmp_path, bearer_token=None), open_store=False)


async def test_favicon_needs_no_token(tmp_path: Path) -> None:
    """A browser's /favicon.ico got a 401 (and a WWW-Authenticate prompt) from a bearer server."""
    app = create_app(make_settings(tmp_path), open_store=False)
    async with app.test_app() as test_app:
        r = await test_app.test_client().get("/favicon.ico")
        assert r.status_code == 200 and r.mimetype == "image/png"
        assert await r.get_data() == (ROOT / ".well-known" / "logo.png").read_bytes()
