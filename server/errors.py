"""One JSON error shape for every 4xx and 5xx: {"error": {"code", "message", "field"?}}."""

from __future__ import annotations

import logging
from typing import Any

from pydantic import ValidationError
from quart import Quart, Response, current_app, jsonify, request
from quart_schema import RequestSchemaValidationError
from werkzeug.exceptions import BadRequest, HTTPException

from services.errors import PyramindError

log = logging.getLogger(__name__)

# pydantic error types (raised by models/api.py) of well-formed values the API cannot take: 422 rather than 400
UNPROCESSABLE = frozenset({"out_of_range", "bad_name"})
# pydantic error types whose message names the model class ("... instance of QueryRequest"): said in JSON terms
NOT_AN_OBJECT = frozenset({"model_type", "model_attributes_type", "dict_type"})


def _message(error: dict[str, Any]) -> str:
    """pydantic's message for one error, without the internal class names it would show."""
    if error.get("type") in NOT_AN_OBJECT:
        return "must be a JSON object"
    return str(error.get("msg", "invalid value"))


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
    """Map every error to the one shape: validation -> 400 naming the field, PyramindError -> its status,
    HTTP errors (401, 404, 405, 413...) -> their status, anything else -> 500 without internals."""

    @app.errorhandler(RequestSchemaValidationError)
    async def _invalid(err: RequestSchemaValidationError) -> Response:
        ve = err.validation_error
        if isinstance(ve, ValidationError) and ve.errors():
            first = ve.errors()[0]
            field = _loc(tuple(first.get("loc", ())))
            if not field and first.get("type") in NOT_AN_OBJECT:
                return error_response(400, "invalid_request", _body_not_an_object())
            msg = _message(dict(first))
            status = 422 if first.get("type") in UNPROCESSABLE else 400
            return error_response(status, "invalid_request", f"{field}: {msg}" if field else msg, field or None)
        return error_response(400, "invalid_request", _body_not_an_object())

    @app.errorhandler(PyramindError)
    async def _domain(err: PyramindError) -> Response:
        if err.status >= 500:
            log.error("request failed: %s: %s", err.code, err.message)
        return error_response(err.status, err.code, err.message, err.field)

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
