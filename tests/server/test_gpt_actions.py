"""The OpenAPI document a custom GPT imports passes every GPT Actions constraint OpenAI publishes.

Walked on the document served with PUBLIC_URL=https://memory.example.com (bearer auth and JWT), and on the local
server's (no auth). Constraints: OpenAPI 3.0/3.1; one https server; at most 30 operations; every operation with a
unique operationId of letters, digits, `_` or `-`; descriptions (operations, parameters, request bodies,
properties) present and at most 300 characters; an auth scheme a GPT can use (API key / Bearer) or none;
`x-openai-isConsequential` on every operation. Plus what Pyramind promises: limits from settings in the schema,
`/.well-known/openapi.yaml` equal to `/openapi.json`, and the GPT instruction block under 8,000 characters.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from local_server.main import local_settings
from models.settings import Settings
from server.app import create_app
from tests.support.settings import make_settings

ROOT = Path(__file__).resolve().parents[2]
PUBLIC_URL = "https://memory.example.com"
MAX_DESCRIPTION = 300
MAX_OPERATIONS = 30
MAX_INSTRUCTIONS = 8000
OPERATION_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
SOURCE_FILE = re.compile(r"[\w/]+\.py\b")
# operations that forget or replace memory: a GPT asks the user before calling them (every DELETE, too)
CONSEQUENTIAL = {"delete", "upsert", "forget_by_policy"}
METHODS = {"get", "put", "post", "delete", "patch", "options", "head", "trace"}


async def served(settings: Settings) -> tuple[dict, dict]:
    """(/openapi.json, /.well-known/openapi.yaml) as served by the app built with `settings`."""
    app = create_app(settings, open_store=False)
    async with app.test_app() as test_app:
        client = test_app.test_client()
        r_json = await client.get("/openapi.json")
        r_yaml = await client.get("/.well-known/openapi.yaml")
        assert r_json.status_code == 200 and r_yaml.status_code == 200
        assert r_yaml.mimetype == "text/yaml"
        return await r_json.get_json(), yaml.safe_load(await r_yaml.get_data(as_text=True))


def resolve(doc: dict, node: dict) -> dict:
    while "$ref" in node:
        ref = node["$ref"]
        assert ref.startswith("#/"), f"external $ref not allowed: {ref}"
        target: Any = doc
        for part in ref[2:].split("/"):
            target = target[part]
        node = target
    return node


def properties(doc: dict, schema: dict, where: str, seen: set[int]) -> Iterator[tuple[str, dict]]:
    """Every property of an object schema and of the object schemas nested in it, with its path."""
    schema = resolve(doc, schema)
    if id(schema) in seen:
        return
    seen.add(id(schema))
    for branch in schema.get("anyOf", []) + schema.get("oneOf", []) + schema.get("allOf", []):
        yield from properties(doc, branch, where, seen)
    if "items" in schema:
        yield from properties(doc, schema["items"], where + "[]", seen)
    for name, prop in schema.get("properties", {}).items():
        yield f"{where}.{name}", prop
        yield from properties(doc, prop, f"{where}.{name}", seen)


def operations(doc: dict) -> Iterator[tuple[str, str, dict]]:
    for path, item in doc["paths"].items():
        for method, op in item.items():
            if method in METHODS:
                yield path, method, op


def gpt_action_violations(doc: dict, public_url: str, secured: bool) -> list[str]:  # noqa: C901 (one check per GPT Actions rule, in the rules' order)
    """Every GPT Actions constraint the document breaks (empty when it is importable)."""
    bad: list[str] = []

    def described(what: str, text: object) -> None:
        if not isinstance(text, str) or not text.strip():
            bad.append(f"{what}: no description")
        elif len(text) > MAX_DESCRIPTION:
            bad.append(f"{what}: description of {len(text)} characters (> {MAX_DESCRIPTION})")
        if isinstance(text, str) and SOURCE_FILE.search(text):
            bad.append(f"{what}: the description names a source file")

    if not str(doc.get("openapi", "")).startswith(("3.0", "3.1")):
        bad.append(f"openapi version {doc.get('openapi')!r}")
    if not doc.get("info", {}).get("title") or not doc["info"].get("version"):
        bad.append("info needs title and version")
    described("info", doc["info"].get("description"))
    if doc.get("servers") != [{"url": public_url}]:
        bad.append(f"servers must be exactly [{public_url}], got {doc.get('servers')}")
    if not public_url.startswith("https://"):
        bad.append("the server URL must be https")
    ops = list(operations(doc))
    if len(ops) > MAX_OPERATIONS:
        bad.append(f"{len(ops)} operations (> {MAX_OPERATIONS})")
    ids = [op.get("operationId") for _, _, op in ops]
    if len(set(ids)) != len(ids):
        bad.append(f"duplicate operationIds: {ids}")
    schemes = doc.get("components", {}).get("securitySchemes", {})
    if secured:
        if not schemes or any(s.get("type") != "http" or s.get("scheme") != "bearer" for s in schemes.values()):
            bad.append(f"auth must be one http bearer scheme (API key / Bearer in the GPT editor): {schemes}")
        if doc.get("security") != [{name: []} for name in schemes]:
            bad.append(f"global security must require the bearer scheme: {doc.get('security')}")
    elif schemes or doc.get("security"):
        bad.append("the local server declares no auth")
    for path, method, op in ops:
        where = f"{method.upper()} {path}"
        if not isinstance(op.get("operationId"), str) or not OPERATION_ID.match(op["operationId"]):
            bad.append(f"{where}: operationId {op.get('operationId')!r}")
        described(where, op.get("description"))
        if len(op.get("summary", "")) > MAX_DESCRIPTION:
            bad.append(f"{where}: summary too long")
        if not isinstance(op.get("x-openai-isConsequential"), bool):
            bad.append(f"{where}: no x-openai-isConsequential")
        elif op["x-openai-isConsequential"] != (method == "delete" or op.get("operationId") in CONSEQUENTIAL):
            bad.append(f"{where}: x-openai-isConsequential must be {not op['x-openai-isConsequential']}")
        for param in op.get("parameters", []):
            described(f"{where} parameter {param.get('name')}", param.get("description"))
            if param.get("in") not in ("path", "query", "header"):
                bad.append(f"{where} parameter {param.get('name')}: in {param.get('in')!r}")
        if "requestBody" in op:
            schema = op["requestBody"]["content"]["application/json"]["schema"]
            described(
                f"{where} request body", op["requestBody"].get("description") or resolve(doc, schema).get("description")
            )
            for name, prop in properties(doc, schema, f"{where} body", set()):
                described(name, prop.get("description"))
        for status, response in op.get("responses", {}).items():
            described(f"{where} response {status}", response.get("description"))
            schema = response.get("content", {}).get("application/json", {}).get("schema")
            if schema:
                for name, prop in properties(doc, schema, f"{where} {status}", set()):
                    described(name, prop.get("description"))
    for name, schema in doc.get("components", {}).get("schemas", {}).items():
        for prop_name, prop in properties(doc, schema, name, set()):
            described(prop_name, prop.get("description"))
    return bad


def find_property(doc: dict, schema_name: str, prop: str) -> dict:
    for _, _, op in operations(doc):
        bodies = [op.get("requestBody", {})] + list(op.get("responses", {}).values())
        for body in bodies:
            schema = body.get("content", {}).get("application/json", {}).get("schema", {})
            if schema.get("title") == schema_name:
                return schema["properties"][prop]
    return doc["components"]["schemas"][schema_name]["properties"][prop]


def bound(prop: dict, keyword: str) -> object:
    return next((b[keyword] for b in [prop, *prop.get("anyOf", [])] if keyword in b), None)


@pytest.mark.parametrize("auth", ["bearer", "jwt"])
async def test_served_document_passes_every_gpt_actions_constraint(tmp_path: Path, auth: str) -> None:
    extra = {"jwt_secret": "s" * 32} if auth == "jwt" else {}
    settings = make_settings(tmp_path, public_url=PUBLIC_URL, auth=auth, max_top_k=42, max_queries=7, **extra)
    doc, doc_yaml = await served(settings)
    assert doc == doc_yaml  # one document, two addresses
    assert gpt_action_violations(doc, PUBLIC_URL, secured=True) == []
    # limits come from the settings
    assert bound(find_property(doc, "Query", "top_k"), "maximum") == 42
    assert bound(find_property(doc, "QueryRequest", "queries"), "maxItems") == 7
    assert bound(find_property(doc, "RememberRequest", "messages"), "maxItems") == settings.max_messages
    assert bound(find_property(doc, "FindRequest", "limit"), "maximum") == settings.find_max_limit
    # the namespace query parameter of GET /memories/{memory_id} is declared
    params = {p["name"]: p for p in doc["paths"]["/memories/{memory_id}"]["get"]["parameters"]}
    assert params["namespace"]["in"] == "query" and params["memory_id"]["in"] == "path"
    consequential = {op["operationId"]: op["x-openai-isConsequential"] for _, _, op in operations(doc)}
    assert all(consequential[o] is True for o in ("delete", "upsert", "forget_by_policy", "core_delete"))
    assert not any(consequential[o] for o in ("remember", "query", "find", "get_memory", "stats", "context"))


async def test_local_document_declares_no_auth(tmp_path: Path) -> None:
    settings = local_settings(make_settings(tmp_path, public_url=PUBLIC_URL))
    doc, _ = await served(settings)
    assert gpt_action_violations(doc, PUBLIC_URL, secured=False) == []


async def test_the_walker_catches_what_gpt_actions_refuse(tmp_path: Path) -> None:
    doc, _ = await served(make_settings(tmp_path, public_url=PUBLIC_URL))
    doc["paths"]["/query"]["post"]["description"] = "x" * 301
    del doc["paths"]["/remember"]["post"]["x-openai-isConsequential"]
    doc["components"]["schemas"]["Query"]["properties"]["top_k"].pop("description")
    doc["servers"] = [{"url": "http://localhost:8000"}]
    doc["paths"]["/upsert"]["post"]["x-openai-isConsequential"] = False
    doc["paths"]["/find"]["post"]["description"] += " See server/find_routes.py."
    bad = "\n".join(gpt_action_violations(doc, PUBLIC_URL, secured=True))
    for fragment in (
        "POST /query: description of 301",
        "POST /remember: no x-openai",
        "top_k: no description",
        "servers must be",
        "POST /upsert: x-openai-isConsequential must be True",
        "POST /find: the description names a source file",
    ):
        assert fragment in bad


async def test_ai_plugin_manifest_follows_the_settings(tmp_path: Path) -> None:
    for settings, auth in [
        (make_settings(tmp_path, public_url=PUBLIC_URL), {"type": "user_http", "authorization_type": "bearer"}),
        (local_settings(make_settings(tmp_path)), {"type": "none"}),
    ]:
        app = create_app(settings, open_store=False)
        async with app.test_app() as test_app:
            client = test_app.test_client()
            plugin = await (await client.get("/.well-known/ai-plugin.json")).get_json()
            base = (settings.public_url or "").rstrip("/")
            assert plugin["auth"] == auth and plugin["api"]["url"] == f"{base}/.well-known/openapi.yaml"
            assert (await client.get("/.well-known/logo.png")).status_code == 200
            assert (await client.get("/.well-known/nothing.txt")).status_code == 404
            # no token: a client fetches the legal page before it has one (it used to be a 401)
            legal = await client.get(plugin["legal_info_url"].removeprefix(base))
            assert legal.status_code == 200 and "Pyramind" in await legal.get_data(as_text=True)
            # what a default query returns, said to the model: verbatim level 1 chunks
            model_text = plugin["description_for_model"]
            assert "level 1" in model_text and "by default" in model_text
            assert "every level" not in model_text.split("by default")[1].split(".")[0]
    for static in ("openapi.yaml", "ai-plugin.json"):  # generated, never a file that can drift
        assert not (ROOT / ".well-known" / static).exists()


def test_gpt_instructions_fit_the_instructions_box() -> None:
    text = (ROOT / "docs" / "gpt-instructions.md").read_text(encoding="utf-8")
    assert 500 < len(text) <= MAX_INSTRUCTIONS
    for operation in ("remember", "query", "get_memory", "find", "delete", "context", "core_put"):
        assert f"`{operation}`" in text, operation
    assert "core memory" in text.lower()
