"""The shapes are published once as JSON Schema (``plait schema``) and the OpenAPI
document holds the same ones (issue 26 item 5); what the CLI and the API print matches."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from plait.entrypoints.cli.main import main
from plait.entrypoints.http.models import json_schemas
from tests.http.conftest import Live


def _validator(name: str, schemas: dict[str, Any]) -> jsonschema.Draft202012Validator:
    doc = {"components": {"schemas": schemas}, **schemas[name]}
    return jsonschema.Draft202012Validator(doc)


def test_the_openapi_document_holds_the_published_schemas(live: Live) -> None:
    published = json_schemas()
    assert {"SessionOut", "SessionsOut", "RunOut", "RunsOut", "ErrorOut"} <= set(published)
    with live.client() as c:
        components = c.get("/v1/openapi.json").json()["components"]["schemas"]
        for name, schema in published.items():
            assert components[name] == schema, name
        session = c.post("/v1/sessions", json={}).json()
        _validator("SessionOut", published).validate(session)
        _validator("SessionsOut", published).validate(c.get("/v1/sessions").json())


def test_plait_schema_prints_them_and_cli_output_validates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["schema", "--json"]) == 0
    schemas = json.loads(capsys.readouterr().out)["schemas"]
    assert schemas == json_schemas()
    db = f"sqlite:///{tmp_path / 'p.db'}"
    assert main(["sessions", "new", "--db", db, "--json"]) == 0
    _validator("SessionOut", schemas).validate(json.loads(capsys.readouterr().out))
    assert main(["sessions", "list", "--db", db, "--json"]) == 0
    _validator("SessionsOut", schemas).validate(json.loads(capsys.readouterr().out))
    assert main(["schema", "Nope", "--json"]) == 2
    assert "no published shape 'Nope'" in json.loads(capsys.readouterr().out)["error"]["message"]
