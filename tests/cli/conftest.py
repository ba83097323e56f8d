"""Fixtures for the CLI tests: run ``plait`` in-process (``main(argv)`` with captured
output) or as a real process, with a store, a workspace and scripts under ``tmp_path``."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from plait.adapters.shapes import execution_json, message_json, run_json, session_json
from plait.adapters.stores import open_store
from plait.entrypoints.cli.main import main
from plait.testing import block_network

# --- the documented JSON shapes (docs/cli.md, "JSON output") -----------------------------------

SESSION_FIELDS = {
    "session_id",
    "created_at",
    "workspace",
    "title",
    "model",
    "owner",
    "version",
    "active_run_id",
    "fork_origin",
}
MESSAGE_BASE = {"seq", "message_id", "kind", "run_id", "created_at"}
MESSAGE_FIELDS = {
    "user": MESSAGE_BASE | {"text"},
    "assistant": MESSAGE_BASE | {"text", "step", "model", "tool_calls", "usage", "output"},
    "tool_result": MESSAGE_BASE
    | {"step", "call_id", "tool_name", "status", "content", "reason", "artifact"},
}
RUN_FIELDS = {
    "run_id",
    "session_id",
    "status",
    "model",
    "started_at",
    "ended_at",
    "error",
    "usage",
    "budget",
    "lease",
    "cancel_requested",
    "policy",
    "mcp_servers",
    "output_schema",
    "parent",
}
USAGE_FIELDS = {
    "steps",
    "model_calls",
    "corrections",
    "tool_calls",
    "input_tokens",
    "output_tokens",
}
EXECUTION_FIELDS = {
    "call_id",
    "tool_name",
    "effect",
    "state",
    "result_status",
    "args_digest",
    "idempotency_key",
    "requested_at",
    "started_at",
    "settled_at",
    "decision",
    "decided_by",
    "decision_reason",
    "reviewed_at",
}
ARTIFACT_FIELDS = {"artifact_id", "sha256", "size", "media_type"}
TOOL_STATUSES = {"succeeded", "failed", "denied", "unknown", "cancelled"}


def assert_utc(ts: object) -> None:
    """A documented timestamp: ISO 8601 in UTC."""
    assert isinstance(ts, str), ts
    parsed = datetime.fromisoformat(ts)
    assert parsed.utcoffset() is not None and parsed.utcoffset() == UTC.utcoffset(parsed), ts


def check_session(s: Mapping[str, Any]) -> None:
    assert set(s) == SESSION_FIELDS
    assert isinstance(s["session_id"], str) and s["session_id"]
    assert isinstance(s["version"], int)
    assert_utc(s["created_at"])


def check_message(m: Mapping[str, Any]) -> None:
    assert m["kind"] in MESSAGE_FIELDS, m
    assert set(m) == MESSAGE_FIELDS[m["kind"]], (m["kind"], sorted(m))
    assert isinstance(m["seq"], int) and m["seq"] >= 1
    assert isinstance(m["message_id"], str) and m["message_id"]
    assert_utc(m["created_at"])
    if m["kind"] == "assistant":
        for c in m["tool_calls"]:
            assert set(c) == {"call_id", "name", "arguments"}
            assert isinstance(c["arguments"], dict)
        assert m["usage"] is None or set(m["usage"]) == {"input_tokens", "output_tokens"}
    elif m["kind"] == "tool_result":
        assert m["status"] in TOOL_STATUSES
        assert m["artifact"] is None or set(m["artifact"]) == ARTIFACT_FIELDS


def check_run(r: Mapping[str, Any], *extra: str) -> None:
    assert set(r) == RUN_FIELDS | set(extra), sorted(set(r) ^ (RUN_FIELDS | set(extra)))
    assert set(r["usage"]) == USAGE_FIELDS
    assert r["error"] is None or set(r["error"]) == {"code", "message"}
    assert r["lease"] is None or set(r["lease"]) == {"owner", "expires_at"}
    assert_utc(r["started_at"])
    if r["ended_at"] is not None:
        assert_utc(r["ended_at"])
    for m in r.get("messages", ()):
        check_message(m)
    for e in r.get("executions", ()):
        assert set(e) == EXECUTION_FIELDS
        assert_utc(e["requested_at"])


def assert_contiguous(messages: list[dict[str, Any]], first: int = 1) -> None:
    assert [m["seq"] for m in messages] == list(range(first, first + len(messages)))


# --- running the CLI ---------------------------------------------------------------------------


@dataclass
class Result:
    code: int
    out: str
    err: str

    @property
    def json(self) -> Any:
        return json.loads(self.out)


class Plait:
    """``plait`` in-process. ``plait(...)`` adds ``--db`` for this test's store (after the
    sub-command, where every leaf command accepts it) unless the argv names one already."""

    def __init__(self, capsys: pytest.CaptureFixture[str], db: str) -> None:
        self._capsys = capsys
        self.db = db

    def raw(self, *argv: str) -> Result:
        self._capsys.readouterr()
        code = main(list(argv))
        out, err = self._capsys.readouterr()
        return Result(code, out, err)

    def captured(self) -> tuple[str, str]:
        """What was printed since the last call (e.g. before argparse exited)."""
        out, err = self._capsys.readouterr()
        return out, err

    def __call__(self, *argv: str) -> Result:
        if "--db" in argv:
            return self.raw(*argv)
        return self.raw(*argv, "--db", self.db)

    def ok(self, *argv: str) -> Result:
        r = self(*argv)
        assert r.code == 0, (r.code, r.out, r.err)
        return r

    def json(self, *argv: str) -> Any:
        return self.ok(*argv, "--json").json

    def new_session(self, workspace: Path | None = None, title: str | None = None) -> str:
        argv = ["sessions", "new"]
        if workspace is not None:
            argv += ["--workspace", str(workspace)]
        if title is not None:
            argv += ["--title", title]
        sid = self.json(*argv)["session_id"]
        assert isinstance(sid, str)
        return sid

    def history(self, session_id: str) -> list[dict[str, Any]]:
        messages = self.json("history", session_id)["messages"]
        assert isinstance(messages, list)
        return messages


def sqlite_url(path: Path) -> str:
    """``sqlite:////abs/path`` for an absolute path."""
    assert path.is_absolute()
    return f"sqlite:///{path}"


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every CLI test runs in its own directory, without the caller's PLAIT_* settings and
    without network access."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("PLAIT_DB", raising=False)
    monkeypatch.delenv("PLAIT_MODEL", raising=False)
    with block_network():
        yield


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return sqlite_url(tmp_path / "store" / "plait.db")


@pytest.fixture
def plait(capsys: pytest.CaptureFixture[str], db_url: str) -> Plait:
    return Plait(capsys, db_url)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / "notes.txt").write_text("hello plait\nsecond line\n", encoding="utf-8")
    (ws / "src" / "app.py").write_text("def greet() -> str:\n    return 'hi'\n", encoding="utf-8")
    return ws


def write_script(directory: Path, name: str, script: Mapping[str, Any]) -> str:
    """Write a scripted-model file (JSON) and return its model spec."""
    path = directory / f"{name}.json"
    path.write_text(json.dumps(script, indent=2), encoding="utf-8")
    return f"scripted:{path}"


def call(name: str, call_id: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments, "id": call_id}


# --- reading a store directly (to prove an error changed nothing) -------------------------------


def snapshot(url: str) -> dict[str, Any]:
    """Everything a store holds, in the CLI's JSON shapes."""

    async def go() -> dict[str, Any]:
        store = open_store(url)
        try:
            sessions = await store.list_sessions()
            runs = await store.list_runs()
            return {
                "sessions": [session_json(s) for s in sessions],
                "messages": {
                    s.id: [message_json(m) for m in await store.read_messages(s.id)]
                    for s in sessions
                },
                "runs": [run_json(r) for r in runs],
                "executions": {
                    r.id: [execution_json(e) for e in await store.get_executions(r.id)]
                    for r in runs
                },
            }
        finally:
            await store.close()

    return asyncio.run(go())


# --- real processes ----------------------------------------------------------------------------


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLAIT_")}
    env["XDG_DATA_HOME"] = os.environ["XDG_DATA_HOME"]  # set per test by _isolated
    env.update(extra)
    return env


def run_plait(
    *argv: str,
    cwd: Path,
    input: str | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 30,
) -> subprocess.CompletedProcess[str]:
    """``python -m plait.entrypoints.cli.main ARGV`` in a fresh interpreter."""
    return subprocess.run(
        [sys.executable, "-m", "plait.entrypoints.cli.main", *argv],
        cwd=cwd,
        input=input,
        capture_output=True,
        text=True,
        env=dict(env) if env is not None else child_env(),
        timeout=timeout,
        check=False,
    )
