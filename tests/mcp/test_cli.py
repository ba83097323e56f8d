"""``plait tools list`` and ``plait mcp check NAME`` with a plait.toml naming the fault
server (in-process ``main``; the servers are real, sandboxed processes)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from plait.entrypoints.cli.main import main
from tests.mcp.conftest import FAULT_SERVER, HERE, PYTHON_BINDS

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("bwrap")]


def write_config(ws: Path, extra: str = "") -> None:
    binds = json.dumps([*PYTHON_BINDS, str(HERE)])
    (ws / "plait.toml").write_text(
        f"[mcp.servers.fault]\n"
        f"command = {json.dumps(sys.executable)}\n"
        f"args = [{json.dumps(str(FAULT_SERVER))}]\n"
        f"ro_binds = {binds}\n"
        f'effects = {{ "crash" = "read_only" }}\n{extra}'
    )


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    monkeypatch.chdir(path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("PLAIT_DB", f"sqlite:///{tmp_path / 'plait.db'}")
    return path


def test_tools_list_shows_source_effect_and_decision(
    ws: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_config(ws)
    assert main(["tools", "list", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["tools"]}
    assert rows["read_file"]["source"] == "built-in"
    assert rows["mcp__fault__peek"] == {
        "name": "mcp__fault__peek",
        "source": "mcp:fault",
        "effect": "read_only",
        "destructive": False,
        "decision": "allow",
        "rule": "defaults.read",
        "reason": "a read-only tool",
        "per_call": False,
    }
    assert (rows["write_file"]["decision"], rows["write_file"]["per_call"]) == ("allow", True)
    assert (rows["run_command"]["rule"], rows["run_command"]["per_call"]) == (
        "defaults.command",
        True,
    )
    note = rows["mcp__fault__write_note"]
    assert (note["destructive"], note["decision"], note["rule"]) == (
        True,
        "approve",
        "rules.mcp.destructive",
    )
    assert rows["mcp__fault__crash"]["effect"] == "read_only"  # the config's override
    assert rows["mcp__fault__slow_write"]["decision"] == "approve"  # defaults.other


def test_mcp_check_lists_the_tools_and_names_a_broken_server(
    ws: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_config(ws, '[mcp.servers.broken]\ncommand = "/bin/false"\n')
    assert main(["mcp", "check", "fault"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("MCP server 'fault': ok, ") and "(sandboxed)" in out
    assert "mcp__fault__write_note" in out and "destructive" in out
    assert main(["mcp", "check", "broken", "--json"]) == 2
    captured = capsys.readouterr()
    assert "MCP server 'broken' did not start" in captured.err
    assert json.loads(captured.out)["error"]["code"] == "mcp_server_error"
    assert main(["mcp", "check", "nope"]) == 2
    assert "no MCP server 'nope' in plait.toml" in capsys.readouterr().err


def test_commands_that_do_not_run_the_agent_do_not_start_the_servers(
    ws: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_config(ws, '[mcp.servers.broken]\ncommand = "/bin/false"\n')
    assert main(["sessions", "new", "--workspace", str(ws), "--json"]) == 0
    session = json.loads(capsys.readouterr().out)["session_id"]
    assert main(["sessions", "list"]) == 0
    # sending runs the agent: the broken server is the one clear error
    assert main(["send", session, "hi", "--model", "scripted:none.yaml"]) == 2
    assert "MCP server 'broken' did not start" in capsys.readouterr().err
