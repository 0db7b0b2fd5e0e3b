"""`.well-known` matches the running app; the local server is the same app with local settings."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from local_server.main import LOCAL_PORT, local_settings
from server.app import create_app
from tests.conftest import make_settings

ROOT = Path(__file__).resolve().parents[2]


async def running_schema(settings) -> dict:  # type: ignore[no-untyped-def]
    app = create_app(settings, open_store=False)
    async with app.test_app() as test_app:
        return await (await test_app.test_client().get("/openapi.json")).get_json()


async def test_openapi_yaml_is_the_local_apps_schema(tmp_path: Path) -> None:
    committed = yaml.safe_load((ROOT / ".well-known" / "openapi.yaml").read_text())
    live = await running_schema(local_settings(make_settings(tmp_path)))
    assert committed == live, "run: .venv/bin/pyramind openapi --out .well-known/openapi.yaml"
    assert committed["openapi"].startswith("3.1")
    assert committed["servers"] == [{"url": f"http://localhost:{LOCAL_PORT}"}]
    ops = {op["operationId"] for path in committed["paths"].values() for op in path.values()}
    assert {"remember", "query", "upsert", "delete", "get_memory", "health"} <= ops
    assert all(op.get("description") for path in committed["paths"].values() for op in path.values())


async def test_ai_plugin_points_at_the_served_openapi(tmp_path: Path) -> None:
    plugin = json.loads((ROOT / ".well-known" / "ai-plugin.json").read_text())
    assert plugin["api"]["url"] == f"http://localhost:{LOCAL_PORT}/.well-known/openapi.yaml"
    assert plugin["auth"]["type"] in ("none", "user_http")
    app = create_app(local_settings(make_settings(tmp_path)), open_store=False)
    async with app.test_app() as test_app:
        client = test_app.test_client()
        for name in ("openapi.yaml", "ai-plugin.json", "logo.png"):
            r = await client.get(f"/.well-known/{name}")
            assert r.status_code == 200, name
        r = await client.get("/.well-known/openapi.yaml")
        assert yaml.safe_load(await r.get_data(as_text=True))["info"]["title"] == "Pyramind"
        r = await client.get("/.well-known/../pyproject.toml")
        assert r.status_code == 404


async def test_bearer_app_documents_its_security_and_local_app_is_open(tmp_path: Path) -> None:
    secured = await running_schema(make_settings(tmp_path))
    assert secured["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
    local = local_settings(make_settings(tmp_path))
    assert local.auth == "none" and local.port == LOCAL_PORT
    app = create_app(local, open_store=False)
    async with app.test_app() as test_app:
        r = await test_app.test_client().options(
            "/query", headers={"Origin": "https://chat.openai.com", "Access-Control-Request-Method": "POST"})
        assert r.headers.get("Access-Control-Allow-Origin") == "https://chat.openai.com"
        r = await test_app.test_client().get("/openapi.json", headers={"Origin": "https://evil.example"})
        assert r.headers.get("Access-Control-Allow-Origin") is None


def test_missing_bearer_token_refuses_to_build(tmp_path: Path) -> None:
    import pytest

    with pytest.raises(ValueError, match="BEARER_TOKEN"):
        create_app(make_settings(tmp_path, bearer_token=None), open_store=False)
