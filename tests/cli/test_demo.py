"""``plait demo``: the README's example end to end, in-process (its temporary directory is
redirected under ``tmp_path``)."""

from __future__ import annotations

import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.cli.conftest import Plait, check_run, snapshot

pytestmark = pytest.mark.slow  # the demo runs the project's tests in subprocesses


@pytest.fixture
def demo_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where ``tempfile.mkdtemp`` puts the demo's directory."""
    d = tmp_path / "demo-tmp"
    d.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(d))
    return d


def test_demo_json(plait: Plait, demo_tmp: Path) -> None:
    r = plait.raw("demo", "--json")
    assert r.code == 0, r.err
    d = r.json
    assert set(d) == {
        "session_id",
        "workspace",
        "store",
        "tests_before",
        "tests_after",
        "deploy_config_untouched",
        "run",
        "messages",
    }
    assert d["tests_before"]["passed"] is False
    assert "FAILED" in d["tests_before"]["summary"]
    assert d["tests_after"]["passed"] is True
    assert d["tests_after"]["summary"] == "OK"
    assert d["deploy_config_untouched"] is True
    check_run(d["run"])
    assert d["run"]["status"] == "completed"
    assert d["run"]["session_id"] == d["session_id"]

    (tmp,) = demo_tmp.iterdir()
    workspace = Path(d["workspace"])
    assert workspace.parent == tmp and workspace.is_dir()
    fixed = (workspace / "shop" / "pricing.py").read_text(encoding="utf-8")
    assert "amount * (1 + rate / 100)" in fixed

    # the store it names really holds the session and the conversation
    assert d["store"] == f"sqlite:///{tmp / 'plait.db'}"
    stored = snapshot(d["store"])
    (session,) = stored["sessions"]
    assert session["session_id"] == d["session_id"]
    assert session["title"] == "plait demo"
    assert session["workspace"] == d["workspace"]
    assert stored["messages"][d["session_id"]] == d["messages"]
    kinds = [m["kind"] for m in d["messages"]]
    assert kinds[0] == "user" and kinds[-1] == "assistant"
    calls = [c["name"] for m in d["messages"] if m["kind"] == "assistant" for c in m["tool_calls"]]
    assert calls == ["read_file", "search_text", "read_file", "edit_file"]
    assert all(m["status"] == "succeeded" for m in d["messages"] if m["kind"] == "tool_result")
    assert [m["seq"] for m in d["messages"]] == list(range(1, len(d["messages"]) + 1))

    # and the CLI reads it back
    history = plait.raw("--json", "history", d["session_id"], "--db", d["store"]).json
    assert history["messages"] == d["messages"]


def test_demo_text_then_history_as_suggested(plait: Plait, demo_tmp: Path) -> None:
    r = plait.raw("demo")
    assert r.code == 0, r.err
    out = r.out
    assert "tests before: FAIL" in out
    assert "tests after: pass (OK)" in out
    assert "deploy config untouched: True" in out
    assert "status      completed" in out
    hint = next(line for line in out.splitlines() if line.startswith("see it again with: "))
    argv = shlex.split(hint.removeprefix("see it again with: "))
    # runnable as printed: `uv run plait ...` under uv (from the project), else
    # `python -m plait ...` (or `plait` when that is what was run)
    command = argv.index("history")
    assert argv[:command] in (["uv", "run", "plait"], [sys.executable, "-m", "plait"])
    again = subprocess.run(
        [sys.executable, "-m", "plait", *argv[command:]],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert again.returncode == 0, again.stderr
    assert "edit_file" in again.stdout


def test_demo_clean_removes_its_directory(plait: Plait, demo_tmp: Path) -> None:
    r = plait.raw("demo", "--clean", "--json")
    assert r.code == 0, r.err
    assert r.json["run"]["status"] == "completed"
    assert not Path(r.json["workspace"]).exists()
    assert list(demo_tmp.iterdir()) == []

    text = plait.raw("demo", "--clean")
    assert text.code == 0
    assert "(--clean: the workspace and its store were removed)" in text.out
    assert list(demo_tmp.iterdir()) == []


def test_demo_into_a_given_store(plait: Plait, demo_tmp: Path, tmp_path: Path) -> None:
    url = f"jsonl:///{tmp_path / 'demo-store'}"
    r = plait.raw("demo", "--db", url, "--json", "--clean")
    assert r.code == 0, r.err
    assert r.json["store"] == url
    stored = snapshot(url)  # outlives --clean: it is not in the demo's directory
    assert [s["session_id"] for s in stored["sessions"]] == [r.json["session_id"]]
    assert list(demo_tmp.iterdir()) == []


def test_demo_hint_under_uv_run_says_uv_run(monkeypatch: pytest.MonkeyPatch) -> None:
    # `uv run` puts the venv's `plait` on PATH for the child only: the hint must not be a
    # bare `plait`, which the user's own shell would not find.
    from plait.entrypoints.cli import demo

    monkeypatch.setenv("UV", "/usr/bin/uv")
    monkeypatch.setattr("shutil.which", lambda name: sys.argv[0])
    assert demo._invocation() == "uv run plait"
    monkeypatch.delenv("UV")
    assert demo._invocation() == "plait"
