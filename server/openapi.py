"""The OpenAPI document a GPT Action imports, generated from the running app and its settings.

`GPTActionsOpenAPI` is quart-schema's provider with what GPT Actions need added to the generated document:
`servers` is PUBLIC_URL (set by the app factory), the security scheme in force (bearer for AUTH=bearer/jwt, none
for the local server), `x-openai-isConsequential` on every operation (true for what forgets or replaces memory:
every DELETE, `upsert` and `/forget`; so a GPT asks the user before those, and calls reads and remember without
asking each time), and the limits that come from settings (top_k, list sizes,
message length) as `maximum`/`maxItems`/`maxLength`. `/openapi.json` and `/.well-known/openapi.yaml` serve it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from quart_schema import OpenAPIProvider
from quart_schema.openapi import QUART_SCHEMA_OPERATION_ID_ATTRIBUTE

from models.settings import Settings

# (component schema, property) -> (JSON-schema keyword, setting); missing components are skipped (a route
# module that another build leaves out)
SETTING_LIMITS: dict[tuple[str, str], tuple[str, str]] = {
    ("Query", "top_k"): ("maximum", "max_top_k"),
    ("Query", "query"): ("maxLength", "max_query_chars"),
    ("ContextRequest", "query"): ("maxLength", "max_query_chars"),
    ("QueryRequest", "queries"): ("maxItems", "max_queries"),
    ("RememberRequest", "messages"): ("maxItems", "max_messages"),
    ("Message", "content"): ("maxLength", "max_message_chars"),
    ("UpsertRequest", "documents"): ("maxItems", "max_documents"),
    ("FindRequest", "limit"): ("maximum", "find_max_limit"),
}
# operations besides every DELETE that forget or replace memory (an upsert replaces a document of the same id)
CONSEQUENTIAL_OPERATIONS = frozenset({"upsert", "forget_by_policy"})
HEADER_NAMES = {"idempotency-key": "Idempotency-Key"}  # quart-schema writes header names in lower kebab case
PARAMETER_DESCRIPTIONS = {
    "memory_id": "Id of a memory (a chunk or a summary), from /query, /find or another memory's children.",
    "conversation_id": "Id of a conversation (as given to /remember, or from GET /conversations); the browse "
    "routes also take a document id.",
    "key": "Key of the core memory entry, as set with PUT /core.",
    "instruction_id": "Id of a standing instruction or preference, from GET /instructions.",
}


def named_schemas(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every named object schema of the document: components and the inline request/response bodies."""
    out: dict[str, dict[str, Any]] = dict(doc.get("components", {}).get("schemas", {}))
    for ops in doc.get("paths", {}).values():
        for op in ops.values():
            bodies = [op.get("requestBody", {})] + list(op.get("responses", {}).values())
            for body in bodies:
                schema = body.get("content", {}).get("application/json", {}).get("schema", {})
                if "title" in schema and "properties" in schema:
                    out.setdefault(schema["title"], schema)
    return out


def apply_limit(prop: dict[str, Any], keyword: str, value: int) -> None:
    """Set the keyword on the property, or on its non-null branch when it is optional (anyOf [.., null])."""
    targets = [b for b in prop.get("anyOf", []) if b.get("type") != "null"] or [prop]
    for target in targets:
        target[keyword] = value


def gpt_actions_document(doc: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """`doc` (quart-schema's) with the GPT Actions additions described in the module docstring."""
    schemas = named_schemas(doc)
    for (name, prop), (keyword, setting) in SETTING_LIMITS.items():
        target = schemas.get(name, {}).get("properties", {}).get(prop)
        if target is not None:
            apply_limit(target, keyword, getattr(settings, setting))
    for ops in doc.get("paths", {}).values():
        for method, op in ops.items():
            op["x-openai-isConsequential"] = method == "delete" or op.get("operationId") in CONSEQUENTIAL_OPERATIONS
            for param in op.get("parameters", []):
                if param.get("in") == "header" and param["name"] in HEADER_NAMES:
                    param["name"] = HEADER_NAMES[param["name"]]
                if not param.get("description") and param["name"] in PARAMETER_DESCRIPTIONS:
                    param["description"] = PARAMETER_DESCRIPTIONS[param["name"]]
    return doc


class GPTActionsOpenAPI(OpenAPIProvider):
    """quart-schema's provider: the route's `@operation_id` as given (`remember`, not `post_remember`), and the
    document finished by `gpt_actions_document` with the app's settings."""

    def operation_id(self, method: str, path: str, func: Callable[..., Any]) -> str | None:
        explicit = getattr(func, QUART_SCHEMA_OPERATION_ID_ATTRIBUTE, None)
        return explicit or super().operation_id(method, path, func)

    def schema(self) -> dict[str, Any]:
        doc = super().schema()
        settings: Settings | None = self._app.extensions.get("pyramind.settings")
        return gpt_actions_document(doc, settings) if settings is not None else doc
