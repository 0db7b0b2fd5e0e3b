"""One JSON error shape for every 4xx and 5xx: {"error": {"code", "message", "field"?}}, and the one place where
the datastore's and services' errors (services/errors.py) get their HTTP status, headers and MCP tool-error text.

`STATUS` maps each domain error class to its status; `http_parts` adds Retry-After for a full backlog; REST
(`install_error_handlers`) and MCP (`tool_message`, server/mcp_tools.py) both describe an error through
`one_line`, and a request that fails validation through `validation_parts`, so both doors say the same thing.
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import ValidationError
from quart import Quart, Response, current_app, jsonify, request
from quart_schema import RequestSchemaValidationError
from quart_schema.validation import RequestHeadersValidationError
from werkzeug.exceptions import BadRequest, HTTPException

from models.api import FieldError
from server.metrics import note_error
from services.errors import (
    BacklogFullError,
    ConflictError,
    EmbeddingError,
    ForbiddenError,
    InvalidRequestError,
    NotFoundError,
    PyramindError,
    StoreError,
    StoreUnavailableError,
    SummaryError,
    UnsupportedError,
)

log = logging.getLogger(__name__)

# the HTTP status of each domain error (the first class of an error's MRO found here); anything else is a 500
STATUS: dict[type[PyramindError], int] = {
    InvalidRequestError: 422,
    NotFoundError: 404,
    ForbiddenError: 403,
    ConflictError: 409,
    BacklogFullError: 429,
    UnsupportedError: 501,
    EmbeddingError: 503,
    SummaryError: 503,
    StoreUnavailableError: 503,
    StoreError: 500,
}
# pydantic error types whose message names the model class ("... instance of QueryRequest"): said in JSON terms
NOT_AN_OBJECT = frozenset({"model_type", "model_attributes_type", "dict_type"})


def status_of(err: PyramindError) -> int:
    """The HTTP status of a domain error: STATUS of its class or the nearest base class listed, else 500."""
    for cls in type(err).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 500


def http_parts(err: PyramindError) -> tuple[int, dict[str, str]]:
    """(status, headers) of a domain error: Retry-After (seconds) for a full backlog."""
    headers = {"Retry-After": str(err.retry_after)} if isinstance(err, BacklogFullError) else {}
    return status_of(err), headers


def one_line(message: str, field: str | None) -> str:
    """`field: message` on one line (no line breaks, no pydantic URLs): the text of an MCP tool error."""
    text = " ".join(message.split())
    return f"{field}: {text}" if field and not text.startswith(f"{field}:") else text


def tool_message(err: PyramindError) -> str:
    """What an MCP tool answers for a domain error: the same code and text as the REST error body."""
    return f"{err.code}: {one_line(err.message, err.field)}"


def validation_parts(ve: ValidationError) -> tuple[str | None, str]:
    """(field, message) of a request that failed validation: the first error's location (`queries[0].top_k`)
    and pydantic's message for it, without URLs or internal class names; field None when the value as a whole
    is not an object. A check across fields that blames one (models.api.FieldError) names that one under the
    model's location (`ids` of DELETE /delete, `queries[0].filter.min_level`)."""
    errs = ve.errors(include_url=False)
    if not errs:
        return None, "invalid value"
    first: dict[str, Any] = dict(errs[0])
    loc = tuple(errs[0]["loc"])
    blamed = (first.get("ctx") or {}).get("error")
    if isinstance(blamed, FieldError):
        loc = (*loc, blamed.field)
    field = _loc(loc)
    msg = _message(first)
    if first.get("type") == "extra_forbidden":
        msg = "unknown field (not accepted here)"
    return field or None, msg


def _message(error: dict[str, Any]) -> str:
    """pydantic's message for one error, without the internal class names it would show."""
    if error.get("type") in NOT_AN_OBJECT:
        return "must be a JSON object"
    return str(error.get("msg", "invalid value")).removeprefix("Value error, ")


def _body_not_an_object() -> str:
    """What to say when the body as a whole is not a JSON object; most often it was not sent as JSON at all."""
    if not request.is_json:
        return (
            "the body must be a JSON object sent with Content-Type: application/json (got "
            f"{request.mimetype or 'no Content-Type'})"
        )
    return "the request body must be a JSON object matching the schema"


def error_response(
    status: int, code: str, message: str, field: str | None = None, headers: dict[str, str] | None = None
) -> Response:
    body: dict[str, Any] = {"code": code, "message": message}
    if field:
        body["field"] = field
    resp = jsonify({"error": body})
    resp.status_code = status
    for k, v in (headers or {}).items():
        resp.headers[k] = v
    return resp


def too_large_message(limit: int) -> str:
    """The 413 message: the limit in bytes and the setting that raises it."""
    return f"the request body is larger than {limit} bytes (MAX_BODY_BYTES)"


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def install_error_handlers(app: Quart) -> None:
    """Map every error to the one shape: a JSON body or a query string failing validation -> 422 naming the field
    (a body not sent as JSON -> 400, as is one that does not parse), PyramindError -> its status (`http_parts`),
    HTTP errors (401, 404, 405, 413...) -> their status, anything else -> 500 without internals."""

    @app.errorhandler(RequestSchemaValidationError)
    async def _invalid(err: RequestSchemaValidationError) -> Response:
        ve = err.validation_error
        if isinstance(ve, ValidationError) and ve.errors():
            field, msg = validation_parts(ve)
            if field is None and ve.errors()[0].get("type") in NOT_AN_OBJECT:
                return error_response(422 if request.is_json else 400, "invalid_request", _body_not_an_object())
            return error_response(422, "invalid_request", one_line(msg, field), field)
        return error_response(422 if request.is_json else 400, "invalid_request", _body_not_an_object())

    @app.errorhandler(RequestHeadersValidationError)
    async def _invalid_header(err: RequestHeadersValidationError) -> Response:
        ve = err.validation_error
        field = "Idempotency-Key"  # the one validated header
        msg = validation_parts(ve)[1] if isinstance(ve, ValidationError) else "invalid header"
        return error_response(422, "invalid_request", one_line(msg, field), field)

    @app.errorhandler(PyramindError)
    async def _domain(err: PyramindError) -> Response:
        status, headers = http_parts(err)
        note_error(err)  # a store error is counted (/metrics)
        if status >= 500:
            log.error("request failed: %s: %s", err.code, err.message)
        return error_response(status, err.code, err.message, err.field, headers)

    @app.errorhandler(HTTPException)
    async def _http(err: HTTPException) -> Response:
        if type(err) is BadRequest:  # what get_json raises for a body that is not JSON
            return error_response(400, "invalid_json", "the request body must be valid JSON (UTF-8)")
        code = (err.name or "error").lower().replace(" ", "_")
        headers = {k: v for k, v in err.get_headers() if k.lower() != "content-type"}  # Allow, Retry-After
        message = err.description or err.name
        if err.code == 413:
            message = too_large_message(current_app.config["MAX_CONTENT_LENGTH"])
        return error_response(err.code or 500, code, message, headers=headers)

    @app.errorhandler(UnicodeDecodeError)  # quart decodes the body as UTF-8 before json.loads, outside its ValueError
    @app.errorhandler(RecursionError)  # json.loads of arrays/objects nested deeper than the recursion limit
    async def _unreadable_body(err: Exception) -> Response:
        if isinstance(err, RecursionError) and "JSON" not in str(err):
            return await _unexpected(err)
        return error_response(400, "invalid_json", "the request body must be valid JSON (UTF-8)")

    @app.errorhandler(Exception)
    async def _unexpected(err: Exception) -> Response:
        log.exception("unhandled error")
        return error_response(500, "internal_error", "internal error; see the server log")
