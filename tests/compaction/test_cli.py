"""``plait compact``, ``plait context`` and summaries in ``plait history``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from plait.adapters.stores.sqlite.store import SqliteStore
from plait.application.ports import Commit
from plait.domain.session import Session
from plait.entrypoints.cli.main import main
from tests.compaction.conftest import coding_history, good_summary, run


def seed(db: Path, rounds: int) -> None:
    async def go() -> None:
        store = SqliteStore.open(db)
        await store.create_session(Session(id="s1", created_at=0.0))
        msgs = tuple(coding_history(rounds))
        await store.commit(Commit(session_id="s1", expected_version=0, messages=msgs))
        await store.close()

    run(go())


def script(tmp_path: Path, summaries: list[Any]) -> str:
    path = tmp_path / "model.json"
    path.write_text(
        json.dumps(
            {
                "version": 1,
                "model": "scripted",
                "capabilities": {"context_window": 4_000, "max_output_tokens": 500},
                "summarizer": [{"structured": s} for s in summaries],
            }
        )
    )
    return f"scripted:{path}"


def plait(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any]:
    code = main(["--json", *argv])
    out = capsys.readouterr().out
    return code, json.loads(out)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "plait.db"
    seed(path, 24)
    return path


def test_compact_then_context_and_history(
    tmp_path: Path, db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = script(tmp_path, [good_summary()] * 3)
    url = f"sqlite:///{db}"
    code, before = plait(capsys, "context", "s1", "--db", url, "--model", model)
    assert code == 0
    assert before["summary"] is None and before["over_threshold"] is True
    assert before["budget"]["context_window"] == 4_000
    assert before["tokens"]["total"] == sum(
        v for k, v in before["tokens"].items() if k not in ("total", "raw_history_alone")
    )
    code, done = plait(capsys, "compact", "s1", "--db", url, "--model", model)
    assert code == 0 and done["status"] == "compacted", done
    through = done["summary"]["covers"]["through_seq"]
    code, after = plait(capsys, "context", "s1", "--db", url, "--model", model, "--items")
    assert after["summary"]["id"] == done["summary"]["id"]
    assert after["raw_tail_from_seq"] == through + 1
    assert after["tokens"]["total"] < before["tokens"]["total"]
    items = after["items"]
    assert items[0]["trust"] == "derived" and items[1]["id"] == "m1"
    assert {i["trust"] for i in items} == {"derived", "user", "model", "data"}
    assert after["constraints"] == [{"text": "不要修改部署配置。", "source_message_id": "m1"}]
    code, hist = plait(capsys, "history", "s1", "--db", url)
    assert len(hist["messages"]) == 73  # raw history complete
    assert [s["id"] for s in hist["summaries"]] == [done["summary"]["id"]]
    assert hist["summaries"][0]["replaces_in_context"] == f"messages 1..{through}"
    assert hist["constraints"][0]["source_message_id"] == "m1"


def test_text_output_and_errors(
    tmp_path: Path, db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{db}"
    model = script(tmp_path, [{"goal": ""}, {"goal": ""}])
    assert main(["compact", "s1", "--db", url, "--model", model]) == 1
    assert "failed: the summarizer gave no valid summary" in capsys.readouterr().out
    assert main(["context", "s1", "--db", url, "--model", model]) == 0
    text = capsys.readouterr().out
    assert "over the input budget" in text and "recent history" in text
    code, err = plait(capsys, "context", "s1", "--db", url)
    assert code == 2 and "pass --model" in err["error"]["message"]
    code, err = plait(capsys, "context", "nope", "--db", url, "--model", model)
    assert code == 2 and err["error"]["code"] == "session_not_found"


def test_a_model_without_a_window_is_the_same_error_on_every_command(
    tmp_path: Path, db: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """TOKEN_METER_MODEL_UNCONFIGURED means one thing: automatic compaction (on by
    default) cannot budget this model, so every command that would measure it refuses it
    before anything is written or sent."""
    path = tmp_path / "nowindow.json"
    path.write_text(
        json.dumps(
            {
                "version": 1,
                "capabilities": {"context_window": None},
                "assistant": [{"text": "never asked"}],
            }
        )
    )
    model, url = f"scripted:{path}", f"sqlite:///{db}"
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO("hello\n"))
    before = len(run(_messages(db)))
    for argv in (
        ["context", "s1"],
        ["compact", "s1"],
        ["send", "s1", "hello"],
        ["chat", "--session", "s1"],
    ):
        code = main([*argv, "--db", url, "--model", model, "--json"])
        out, err = capsys.readouterr()
        assert code == 2, (argv, out, err)
        error = json.loads(out)["error"]
        assert error["code"] == "token_meter_model_unconfigured", argv
        assert error["message"].startswith("TOKEN_METER_MODEL_UNCONFIGURED: model 'scripted'")
        assert "declares no context window" in error["message"]
    assert len(run(_messages(db))) == before  # nothing written


async def _messages(db: Path) -> list[Any]:
    store = SqliteStore.open(db)
    try:
        return await store.read_messages("s1")
    finally:
        await store.close()
