"""HTTP lives in server/ only (issue 26, item 3): no module of models/, services/, datastore/ or local_server/
imports quart, quart_schema, werkzeug or hypercorn, and no domain error carries an HTTP status; server/errors.py
gives every domain error class its status in one place."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import services.errors as domain
from server.errors import STATUS, http_parts, status_of

ROOT = Path(__file__).resolve().parents[1]
HTTP = ("quart", "quart_schema", "werkzeug", "hypercorn", "quart_rate_limiter", "quart_cors")


def imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", ["models", "services", "datastore", "local_server"])
def test_no_http_library_is_imported_outside_server(package: str) -> None:
    found = {
        str(path.relative_to(ROOT)): sorted(imported(path) & set(HTTP))
        for path in (ROOT / package).rglob("*.py")
        if imported(path) & set(HTTP)
    }
    assert found == {}


def test_every_domain_error_gets_its_status_and_headers_in_server() -> None:
    errors = [
        cls
        for cls in vars(domain).values()
        if isinstance(cls, type) and issubclass(cls, domain.PyramindError) and cls is not domain.PyramindError
    ]
    for cls in errors:
        assert not hasattr(cls, "status"), cls  # no HTTP in the domain's errors
        assert any(base in STATUS for base in cls.__mro__), cls
    assert status_of(domain.EmbeddingMismatchError("x")) == 500 and status_of(domain.NotFoundError("x")) == 404
    assert http_parts(domain.BacklogFullError("full", retry_after=7)) == (429, {"Retry-After": "7"})
