"""What a new user hit on a first try (issue 26 item 6): each an error that names the
fix, and nothing made or written when a command is refused."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import Plait, write_script


def test_a_plain_path_as_db_says_which_url_it_meant(plait: Plait, tmp_path: Path) -> None:
    r = plait.raw("sessions", "list", "--db", "./x.db", "--json")
    assert r.code == 2
    assert "did you mean 'sqlite:///./x.db'?" in r.json["error"]["message"]
    (tmp_path / "dir").mkdir()
    r = plait.raw("sessions", "list", "--db", "dir", "--json")
    assert "did you mean 'jsonl:///dir'?" in r.json["error"]["message"]
    assert not (tmp_path / "x.db").exists()


def test_db_upgrade_on_sqlite_creates_nothing(plait: Plait, tmp_path: Path) -> None:
    r = plait.raw("db", "upgrade", "--db", "sqlite:///x.db", "--json")
    assert r.code == 2 and "is for PostgreSQL stores" in r.json["error"]["message"]
    assert not (tmp_path / "x.db").exists()


def test_the_worker_summary_is_json(plait: Plait, monkeypatch: pytest.MonkeyPatch) -> None:
    summary = {"worker": "w1", "claimed": 2, "recovered": 0, "released": 0, "finished": 2}

    async def fake_worker(settings: Any) -> dict[str, Any]:
        return summary

    monkeypatch.setattr("plait.entrypoints.cli.service_cmds.run_worker", fake_worker)
    r = plait("worker")
    assert r.code == 0, r.err
    line = r.out.strip()
    assert line.startswith("worker stopped: ")
    assert json.loads(line.removeprefix("worker stopped: ")) == summary


def test_policy_explain_on_an_unknown_tool(plait: Plait, workspace: Path) -> None:
    sid = plait.new_session(workspace)
    r = plait("policy", "explain", sid, "no_such_tool", "{}", "--json")
    assert r.code == 2, r.out
    message = r.json["error"]["message"]
    assert "tool 'no_such_tool' does not exist" in message and "read_file" in message
    assert "defaults" not in r.out
    ok = plait.json("policy", "explain", sid, "read_file", '{"path": "notes.txt"}')
    assert ok["action"] == "allow"


def test_budget_defaults_are_in_the_help(plait: Plait) -> None:
    with pytest.raises(SystemExit):
        plait.raw("send", "--help")
    out, _ = plait.captured()
    flat = " ".join(out.split())
    assert "--max-steps MAX_STEPS agent steps (default: 50)" in flat
    assert "(default: 600)" in flat and "(default: no limit)" in flat
    assert "(default: 32000)" in flat


def test_demo_with_a_model_but_no_key_fails_first(
    plait: Plait, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    demo_tmp = tmp_path / "demo-tmp"
    demo_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(demo_tmp))
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    r = plait.raw("demo", "--model", "anthropic:claude-haiku-4-5")
    assert r.code == 2
    assert "needs an API key: set ANTHROPIC_API_KEY" in r.err
    assert "tests before" not in r.out and r.out == ""
    assert list(demo_tmp.iterdir()) == []  # no demo directory left behind


def test_a_message_larger_than_the_window_is_refused(
    plait: Plait, workspace: Path, tmp_path: Path
) -> None:
    model = write_script(
        tmp_path,
        "small",
        {
            "version": 1,
            "model": "small",
            "capabilities": {"context_window": 100_000, "max_output_tokens": 500},
            "assistant": [{"text": "ok"}],
        },
    )
    sid = plait.new_session(workspace)
    big = tmp_path / "big.txt"
    big.write_text("lorem ipsum dolor sit amet " * 400_000, encoding="utf-8")  # ~10 MB
    r = plait("send", sid, "--file", str(big), "--model", model, "--json")
    assert r.code == 2, r.out[:300]
    message = r.json["error"]["message"]
    assert "cannot fit model 'scripted:small'" in message and "100000 tokens" in message
    assert plait.json("runs", "list", "--session", sid)["runs"] == []
    assert plait.history(sid) == []


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
def test_a_store_on_a_read_only_mount_can_be_read(plait: Plait, tmp_path: Path) -> None:
    """The store's directory mounted read-only (bubblewrap): listing works, a write says
    the store is read-only (not "unable to open database file")."""
    store = tmp_path / "ro"
    url = f"sqlite:///{store / 'plait.db'}"
    sid = plait.json("sessions", "new", "--db", url, "--title", "kept")["session_id"]
    probe = subprocess.run(["bwrap", "--bind", "/", "/", "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"bubblewrap cannot run here: {probe.stderr.decode()[:200]}")

    def inside(*argv: str) -> subprocess.CompletedProcess[str]:
        mounts = ["--bind", "/", "/", "--ro-bind", str(store), str(store)]
        plait_argv = [sys.executable, "-m", "plait", *argv, "--db", url, "--json"]
        return subprocess.run(
            ["bwrap", *mounts, "--dev", "/dev", "--proc", "/proc", *plait_argv],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )

    listed = inside("sessions", "list")
    assert listed.returncode == 0, listed.stderr
    assert [s["session_id"] for s in json.loads(listed.stdout)["sessions"]] == [sid]
    written = inside("sessions", "new")
    assert written.returncode == 2
    assert "is on a read-only location" in written.stderr, written.stderr
