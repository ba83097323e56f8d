"""Every error the API answers with has a code docs/service.md's error table lists, and
protocol-level answers carry the headers HTTP requires (``Allow`` on a 405)."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import TypeGuard

import httpx
import pytest

import plait.domain.errors as domain_errors
from plait.domain.errors import PlaitError
from plait.entrypoints.http import _errors
from plait.entrypoints.http._errors import HTTP_CODES, http_status_and_body, status_and_body
from tests.http.conftest import Live
from tests.http.test_api import error, new_session

ROOT = Path(__file__).resolve().parents[2]
HTTP_SOURCES = ROOT / "src" / "plait" / "entrypoints" / "http"


def _documented_codes() -> set[str]:
    """The codes of the error table in docs/service.md (first column of each row)."""
    text = (ROOT / "docs" / "service.md").read_text(encoding="utf-8")
    section = text.split("### Error codes", 1)[1].split("\n#", 1)[0]
    return set(re.findall(r"^\| `([a-z_]+)` \|", section, re.MULTILINE))


def _is_text(node: ast.expr | None) -> TypeGuard[_Text]:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


class _Text(ast.Constant):
    value: str


def _codes_in_http_sources() -> set[str]:
    """String codes the HTTP adapter writes itself: ``code=...`` arguments, the first
    argument of ``error_body(...)`` and ``"code": ...`` entries."""
    found: set[str] = set()
    for path in HTTP_SOURCES.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "id", getattr(node.func, "attr", ""))
                args = node.args[:1] if name == "error_body" else []
                values = [k.value for k in node.keywords if k.arg == "code"] + args
                found |= {v.value for v in values if _is_text(v)}
            elif isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values, strict=True):
                    is_code = isinstance(key, ast.Constant) and key.value == "code"
                    if is_code and _is_text(value):
                        found.add(value.value)
    return found


def _codes_of_domain_errors() -> set[str]:
    classes = [
        c for c in vars(domain_errors).values() if isinstance(c, type) and issubclass(c, PlaitError)
    ]
    assert len(classes) > 10
    return {status_and_body(c("message"))[1]["error"]["code"] for c in classes}


def _codes_of_framework_answers() -> set[str]:
    return {http_status_and_body(s, "detail")[1]["error"]["code"] for s in range(400, 600)}


def test_every_code_the_api_answers_with_is_in_the_readme() -> None:
    emitted = _codes_in_http_sources() | _codes_of_domain_errors() | _codes_of_framework_answers()
    assert {"unauthorized", "invalid_request", "internal", "not_ready"} <= emitted
    assert set(HTTP_CODES.values()) <= emitted
    missing = emitted - _documented_codes()
    assert not missing, f"codes the API answers with that docs/service.md does not list: {missing}"
    assert _errors.__doc__ is not None
    assert "http_error" not in _errors.__doc__


@pytest.mark.slow
def test_a_400_from_the_framework_answers_a_documented_code(live: Live) -> None:
    """An attack found ``http_error``, a code the docs do not list, on a JSON body
    holding bytes that are not UTF-8."""
    with live.client("alice") as c:
        bad = c.post(
            "/v1/sessions",
            content=b'{"title": "\xff"}',
            headers={"Content-Type": "application/json"},
        )
        err = error(bad, 422, "invalid_request")
        assert "parsing the body" in err["message"]
        assert c.get("/v1/sessions").json()["sessions"] == []
        # Malformed JSON: said so, with where the parser stopped and why.
        untyped = error(c.post("/v1/sessions", content=b"{nope"), 422, "invalid_request")
        assert "Content-Type: application/json (none was given)" in untyped["message"]
        cut = c.post(
            "/v1/sessions", content=b'{"title": ', headers={"Content-Type": "application/json"}
        )
        err = error(cut, 422, "invalid_request")
        assert err["message"].startswith("invalid request: body: not valid JSON at character 10")
        assert err["details"]["problems"][0]["where"] == "body"
        assert "Expecting value" in err["message"]
        # JSON sent as another type is not read as JSON: said so, naming the type.
        plain = c.post(
            "/v1/sessions", content=b'{"title": "x"}', headers={"Content-Type": "text/plain"}
        )
        err = error(plain, 422, "invalid_request")
        assert "Content-Type: application/json (not 'text/plain')" in err["message"]
        # A body of JSON that is not an object keeps the framework's words.
        listed = c.post("/v1/sessions", json=[1])
        assert "valid dictionary" in error(listed, 422, "invalid_request")["message"]
        assert c.get("/v1/sessions").json()["sessions"] == []


@pytest.mark.slow
def test_a_405_names_the_allowed_methods(live: Live) -> None:
    """An attack (schemathesis) found 405 answers without the ``Allow`` header."""
    with live.client("alice") as c:
        sid = new_session(c)["session_id"]
        cases = {
            "/v1/sessions": {"GET", "POST"},
            f"/v1/sessions/{sid}": {"GET"},
            f"/v1/sessions/{sid}/messages": {"GET", "POST"},
            "/v1/health": {"GET"},
        }
        for path, allowed in cases.items():
            for method in ("DELETE", "PUT", "PATCH"):
                r = c.request(method, path)
                error(r, 405, "method_not_allowed")
                assert set(r.headers["allow"].replace(" ", "").split(",")) == allowed, path
    r = httpx.put(f"{live.url}/v1/ready")  # no key needed to learn that
    assert r.status_code == 405 and r.headers["allow"] == "GET"
