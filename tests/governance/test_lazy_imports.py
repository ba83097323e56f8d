"""Start-up stays light: `Runtime.open` with defaults and a run that needs no command rule
never import the shell parser (``bashlex``), which only a command rule needs; opening and
closing a runtime with defaults imports none of the heavy libraries a run may need later
(pydantic, jsonschema, the MCP and provider SDKs, OpenTelemetry, the HTTP stack...). Fresh
processes, because the test process itself has imported everything already."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

HEAVY = (
    "anthropic",
    "bashlex",
    "fastapi",
    "google.genai",
    "httpx",
    "jsonschema",
    "mcp",
    "openai",
    "opentelemetry",
    "psycopg",
    "pydantic",
    "pydantic_core",
    "referencing",
    "rich",
    "starlette",
    "tiktoken",
    "uvicorn",
    "yaml",
)
"""Libraries `Runtime.open` with defaults and its close must not import."""

OPEN_CLOSE = """\
import asyncio, json, sys
from plait.runtime import Runtime

asyncio.run(Runtime.open().close())
print(json.dumps(sorted(m for m in sys.modules if m in sys.argv[1:])))
"""

PROBE = """\
import asyncio, json, sys
from plait.runtime import Runtime
HEAVY = set(sys.argv[4:])

async def main():
    rt = Runtime.open(db=sys.argv[1], model=sys.argv[2])
    try:
        after_open = "bashlex" in sys.modules
        heavy = sorted(m for m in sys.modules if m in HEAVY)
        session = await rt.service.create_session(workspace=sys.argv[3])
        result = await rt.service.send(session.id, "go")
        print(json.dumps({
            "after_open": after_open,
            "after_run": "bashlex" in sys.modules,
            "status": str(result.run.status),
            "heavy_after_open": heavy,
        }))
    finally:
        await rt.close()

asyncio.run(main())
"""


def _run(tmp_path: Path, calls: list[dict[str, Any]]) -> dict[str, Any]:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("hello\n")
    script = {"version": 1, "assistant": [{"tool_calls": calls}, {"text": "done"}]}
    (tmp_path / "script.json").write_text(json.dumps(script))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLAIT_")}
    env["XDG_DATA_HOME"] = str(tmp_path / "data")
    done = subprocess.run(
        [sys.executable, "-c", PROBE, f"sqlite:///{tmp_path / 'p.db'}",
         f"scripted:{tmp_path / 'script.json'}", str(ws), *HEAVY],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


@pytest.mark.slow
def test_open_and_a_run_without_a_command_rule_do_not_import_the_shell_parser(
    tmp_path: Path,
) -> None:
    read: dict[str, Any] = {"name": "read_file", "arguments": {"path": "a.txt"}, "id": "c1"}
    out = _run(tmp_path, [read])
    assert out["status"].endswith("completed")  # the typed tool parsed its arguments
    assert out == {
        "after_open": False,
        "after_run": False,
        "status": out["status"],
        "heavy_after_open": [],
    }


@pytest.mark.slow
def test_a_command_call_still_parses_its_command(tmp_path: Path) -> None:
    # the default policy decides a run_command call by parsing it: the import happens then
    args = {"command": "ls && pwd"}
    call: dict[str, Any] = {"name": "run_command", "arguments": args, "id": "c1"}
    out = _run(tmp_path, [call])
    assert (out["after_open"], out["after_run"]) == (False, True)


@pytest.mark.slow
def test_open_and_close_with_defaults_import_nothing_heavy(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLAIT_")}
    env["XDG_DATA_HOME"] = str(tmp_path / "data")  # the default SQLite store goes there
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")  # no user plait.toml
    done = subprocess.run(
        [sys.executable, "-c", OPEN_CLOSE, *HEAVY],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
