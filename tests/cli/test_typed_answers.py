"""``plait send --output-schema FILE``: the answer is validated (corrected when it does
not match) and ``--json`` prints its value as ``output``."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.conftest import Plait, check_run, snapshot, write_script

SCHEMA = {
    "type": "object",
    "properties": {"lines": {"type": "integer", "minimum": 0}},
    "required": ["lines"],
    "additionalProperties": False,
}


def _schema_file(tmp_path: Path) -> str:
    path = tmp_path / "answer.schema.json"
    path.write_text(json.dumps(SCHEMA), encoding="utf-8")
    return str(path)


def test_send_with_an_output_schema_prints_the_validated_output(
    plait: Plait, workspace: Path, tmp_path: Path
) -> None:
    model = write_script(
        tmp_path,
        "typed",
        {
            "version": 1,
            "model": "typed",
            "assistant": [
                {"text": "two lines, I think", "rejected": True},
                {"text": '{"lines": 2}'},
            ],
        },
    )
    sid = plait.new_session(workspace)
    r = plait(
        "send",
        sid,
        "How many lines?",
        "--model",
        model,
        "--output-schema",
        _schema_file(tmp_path),
        "--json",
    )
    assert r.code == 0, r.err
    run = r.json
    check_run(run, "messages", "output")
    assert run["output"] == {"lines": 2}
    assert run["output_schema"] == SCHEMA
    assert run["usage"]["corrections"] == 1
    assert [m["kind"] for m in run["messages"]] == ["user", "assistant"]
    assert run["messages"][-1]["output"] == {"lines": 2}
    assert plait.history(sid)[-1]["output"] == {"lines": 2}


def test_an_output_schema_file_that_is_not_json_changes_nothing(
    plait: Plait, workspace: Path, tmp_path: Path, db_url: str
) -> None:
    sid = plait.new_session(workspace)
    before = snapshot(db_url)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    r = plait("send", sid, "hi", "--model", "scripted:x", "--output-schema", str(bad), "--json")
    assert r.code == 2
    assert "--output-schema" in r.json["error"]["message"]
    unknown = tmp_path / "unknown.json"
    unknown.write_text('{"type": "frobnicate"}', encoding="utf-8")
    r = plait("send", sid, "hi", "--model", "scripted:x", "--output-schema", str(unknown))
    assert r.code == 2 and "invalid output schema" in r.err
    assert snapshot(db_url) == before
