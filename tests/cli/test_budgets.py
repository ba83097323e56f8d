"""Budget flags on ``send``: a budget ends the run (exit 1), never the session."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

import pytest

from plait.adapters.stores import open_store
from tests.cli.conftest import ARTIFACT_FIELDS, Plait, call, check_run, write_script


def _loop_script(turns: int) -> dict[str, Any]:
    return {
        "version": 1,
        "model": "looper",
        "assistant": [
            {"text": f"look {i}", "tool_calls": [call("list_dir", f"c_ls{i}", path=".")]}
            for i in range(turns)
        ]
        + [{"text": "finally done"}],
    }


@pytest.mark.slow
def test_max_steps_ends_a_looping_run(plait: Plait, workspace: Path, tmp_path: Path) -> None:
    model = write_script(tmp_path, "loop", _loop_script(5))
    sid = plait.new_session(workspace)
    r = plait("send", sid, "loop", "--model", model, "--max-steps", "1", "--json")
    assert r.code == 1, r.err
    run = r.json
    check_run(run, "messages", "output")
    assert run["status"] == "budget_exhausted"
    assert run["error"]["code"] == "max_steps"
    assert "1 steps" in run["error"]["message"]
    assert run["usage"]["steps"] == 1
    assert run["budget"]["max_steps"] == 1
    assert run["ended_at"] is not None and run["lease"] is None
    # the step's call got its result: nothing is left unpaired
    assert [m["kind"] for m in run["messages"]] == ["user", "assistant", "tool_result"]
    assert run["messages"][2]["status"] == "succeeded"

    text = plait("send", sid, "loop again", "--model", model, "--max-steps", "2")
    assert text.code == 1
    assert "status      budget_exhausted" in text.out
    assert "error       max_steps: the run took its 2 steps" in text.out

    # the session is not ended by a budget: a later send with room finishes the script
    session = plait.json("sessions", "list")["sessions"][0]
    assert session["active_run_id"] is None
    final = plait.json("send", sid, "finish", "--model", model)
    assert final["status"] == "completed"
    assert final["messages"][-1]["text"] == "finally done"
    assert [r["status"] for r in plait.json("runs", "list", "--session", sid)["runs"]] == [
        "completed",
        "budget_exhausted",
        "budget_exhausted",
    ]


def test_max_model_calls(plait: Plait, workspace: Path, tmp_path: Path) -> None:
    model = write_script(tmp_path, "loop", _loop_script(5))
    sid = plait.new_session(workspace)
    r = plait("send", sid, "loop", "--model", model, "--max-model-calls", "2", "--json")
    assert r.code == 1
    assert r.json["status"] == "budget_exhausted"
    assert r.json["error"]["code"] == "max_model_calls"
    assert r.json["usage"]["model_calls"] == 2


def test_max_tokens(plait: Plait, workspace: Path, tmp_path: Path) -> None:
    script = _loop_script(3)
    script["assistant"][0]["usage"] = {"input_tokens": 5_000, "output_tokens": 10}
    model = write_script(tmp_path, "tokens", script)
    sid = plait.new_session(workspace)
    r = plait("send", sid, "loop", "--model", model, "--max-tokens", "1000", "--json")
    assert r.code == 1
    assert r.json["status"] == "budget_exhausted"
    assert r.json["error"]["code"] == "max_total_tokens"
    assert r.json["usage"]["input_tokens"] == 5_000


def test_output_cap_stores_the_whole_output_as_an_artifact(
    plait: Plait, workspace: Path, tmp_path: Path
) -> None:
    big = "".join(f"line {i:05d} of a long file\n" for i in range(400))  # ~10 KB
    (workspace / "big.txt").write_text(big, encoding="utf-8")
    model = write_script(
        tmp_path,
        "big",
        {
            "version": 1,
            "assistant": [
                {"tool_calls": [call("read_file", "c_big", path="big.txt")]},
                {"text": "That is long."},
            ],
        },
    )
    sid = plait.new_session(workspace)
    run = plait.json("send", sid, "read big.txt", "--model", model, "--output-cap", "512")
    assert run["status"] == "completed"
    result = run["messages"][2]
    assert result["status"] == "succeeded"
    artifact = result["artifact"]
    assert artifact is not None and set(artifact) == ARTIFACT_FIELDS
    assert artifact["size"] > len(big.encode()) - 1  # the whole output, not the view
    assert artifact["media_type"].startswith("text/")
    assert artifact["artifact_id"] in result["content"]  # the model is told where it is
    assert len(result["content"].encode()) < 2 * 512
    assert result["content"].startswith("line 00000 of a long file\n")

    async def fetch() -> bytes:
        store = open_store(plait.db)
        try:
            ref, data = await store.get_artifact(artifact["artifact_id"])
            assert ref.sha256 == artifact["sha256"]
            return data
        finally:
            await store.close()

    data = asyncio.run(fetch())
    assert hashlib.sha256(data).hexdigest() == artifact["sha256"]
    assert len(data) == artifact["size"]
    assert data.decode().startswith(big)

    # the same result, read back, and in text form
    assert plait.history(sid)[2] == result
    text = plait.ok("history", sid).out
    assert f"(whole output: artifact {artifact['artifact_id']}, {artifact['size']} bytes)" in text

    # without the cap flag the default (32,000 B) keeps it inline
    sid2 = plait.new_session(workspace)
    inline = plait.json("send", sid2, "read big.txt", "--model", model)["messages"][2]
    assert inline["artifact"] is None
    assert inline["content"].startswith(big)

    # the CLI gives the whole output back
    shown = plait.ok("artifacts", "show", artifact["artifact_id"])
    assert shown.out == data.decode()
    meta = plait.json("artifacts", "show", artifact["artifact_id"])
    assert meta == {
        "artifact_id": artifact["artifact_id"],
        "sha256": artifact["sha256"],
        "size": artifact["size"],
        "media_type": artifact["media_type"],
        "text": data.decode(),
    }
    target = tmp_path / "whole.txt"
    plait.ok("artifacts", "show", artifact["artifact_id"], "-o", str(target))
    assert target.read_bytes() == data


def test_unknown_artifact_is_a_clear_error(plait: Plait) -> None:
    plait.new_session()
    failed = plait("artifacts", "show", "art_nope", "--json")
    assert failed.code == 2
    assert failed.json["error"]["code"] == "artifact_not_found"
    assert "art_nope" in failed.err


def test_max_cost_ends_the_run_before_the_call_past_the_ceiling(
    plait: Plait, workspace: Path, tmp_path: Path
) -> None:
    script = _loop_script(3)
    script["capabilities"] = {"price_input_per_mtok": 3.0, "price_output_per_mtok": 15.0}
    for turn in script["assistant"]:
        turn["usage"] = {"input_tokens": 10_000, "output_tokens": 1_000}  # $0.045 a call
    model = write_script(tmp_path, "priced", script)
    sid = plait.new_session(workspace)
    r = plait("send", sid, "loop", "--model", model, "--max-cost", "0.08", "--json")
    assert r.code == 1, r.err
    run = r.json
    assert run["status"] == "budget_exhausted"
    assert run["error"] == {
        "code": "max_cost",
        "message": "the run spent $0.0900 of its $0.08 ceiling",
    }
    assert run["usage"]["model_calls"] == 2  # $0.045 then $0.09: no third call
    assert run["budget"]["max_cost_usd"] == 0.08
    assert plait.json("runs", "show", run["run_id"])["budget"]["max_cost_usd"] == 0.08
    # a ceiling is per run: the next run has room again and finishes the script
    final = plait.json("send", sid, "go on", "--model", model, "--max-cost", "1")
    assert final["status"] == "completed"
    assert final["messages"][-1]["text"] == "finally done"
    assert final["budget"]["max_cost_usd"] == 1.0
