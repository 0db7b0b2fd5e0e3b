"""server/http_errors.py replaces a private hypercorn method (no public hook answers requests hypercorn cannot
parse). Such a patch is allowed only with hypercorn pinned to the tested versions and a test that fails
when the method it replaces changes. The behaviour itself (JSON 400/431 on a live server) is tested in
tests/trust/test_hardening.py::test_malformed_http_gets_the_json_error_shape."""

from __future__ import annotations

import inspect
import re
import tomllib
from importlib.metadata import version
from pathlib import Path

from hypercorn.config import Config
from hypercorn.protocol.h11 import H11Protocol

from server import http_errors

ROOT = Path(__file__).resolve().parents[2]


def hypercorn_requirement() -> str:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return next(d for d in deps if re.match(r"hypercorn\b", d))


def test_hypercorn_is_pinned_to_the_tested_minor_version() -> None:
    major, minor = http_errors.TESTED_HYPERCORN
    assert hypercorn_requirement() == f"hypercorn>={major}.{minor},<{major}.{minor + 1}"
    installed = tuple(int(part) for part in version("hypercorn").split(".")[:2])
    assert installed == http_errors.TESTED_HYPERCORN


def test_the_replaced_method_and_what_the_replacement_uses_are_unchanged() -> None:
    """Fails when hypercorn renames or re-signs what the patch relies on: the method it replaces (and its one
    caller), the event sender it calls, and the config's response headers."""
    original = H11Protocol.__dict__.get("_send_error_response")
    if getattr(original, "_pyramind", False):  # installed by another test in this process: the original is kept
        original = http_errors.ORIGINAL.get("_send_error_response")
    assert original is not None and inspect.iscoroutinefunction(original)
    assert list(inspect.signature(original).parameters) == ["self", "status_code"]
    assert "self._send_error_response(error.error_status_hint)" in inspect.getsource(H11Protocol)
    send = H11Protocol._send_h11_event
    assert inspect.iscoroutinefunction(send) and list(inspect.signature(send).parameters) == ["self", "event"]
    assert list(inspect.signature(Config.response_headers).parameters) == ["self", "protocol"]
    assert isinstance(Config().response_headers("h11"), list)


def test_install_replaces_it_once() -> None:
    assert http_errors.install() is True
    assert getattr(H11Protocol._send_error_response, "_pyramind", False)
    assert http_errors.install() is True  # idempotent
    assert http_errors.ORIGINAL["_send_error_response"] is not H11Protocol._send_error_response
