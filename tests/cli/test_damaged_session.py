"""One damaged JSONL session file is named as damaged and does not hide the others."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from plait.adapters.stores import StoreWarning, open_store
from tests.cli.conftest import call, run_plait, write_script


def _two_sessions(tmp_path: Path) -> tuple[str, str, str, str]:
    url = f"jsonl:///{tmp_path / 'j'}"
    model = write_script(
        tmp_path,
        "m",
        {"version": 1, "assistant": [{"tool_calls": [call("list_dir", "c1")]}, {"text": "ok"}]},
    )
    ws = tmp_path / "ws"
    ws.mkdir()
    sids = []
    for _ in range(2):
        sid = run_plait("sessions", "new", "--workspace", str(ws), "--db", url, cwd=tmp_path)
        sids.append(sid.stdout.strip())
        sent = run_plait("send", sids[-1], "hi", "--model", model, "--db", url, cwd=tmp_path)
        assert sent.returncode == 0, sent.stderr
    good, bad = sids
    path = tmp_path / "j" / "sessions" / f"{bad}.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    path.write_text("".join([lines[0], "garbage in the middle\n", *lines[1:]]), encoding="utf-8")
    return url, good, bad, model


@pytest.mark.slow
def test_listings_name_the_damaged_file_and_show_the_rest(tmp_path: Path) -> None:
    url, good, bad, _ = _two_sessions(tmp_path)
    listed = run_plait("sessions", "list", "--db", url, "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert [s["session_id"] for s in json.loads(listed.stdout)["sessions"]] == [good]
    assert "plait: warning: damaged session file, it left out of this listing" in listed.stderr
    assert f"{bad}.jsonl" in listed.stderr

    runs = run_plait("runs", "list", "--db", url, "--json", cwd=tmp_path)
    assert runs.returncode == 0, runs.stderr
    assert {r["session_id"] for r in json.loads(runs.stdout)["runs"]} == {good}
    assert "damaged session file, its runs left out" in runs.stderr

    history = run_plait("history", bad, "--db", url, "--json", cwd=tmp_path)
    assert history.returncode == 2
    assert json.loads(history.stdout)["error"]["code"] == "corrupt_store"
    assert run_plait("history", good, "--db", url, cwd=tmp_path).returncode == 0


@pytest.mark.slow
def test_the_store_warns_once_per_listing(tmp_path: Path) -> None:
    url, good, _bad, _ = _two_sessions(tmp_path)

    async def go() -> list[str]:
        store = open_store(url)
        try:
            with pytest.warns(StoreWarning, match="damaged session file") as caught:
                sessions = await store.list_sessions()
            assert len(caught) == 1
            return [s.id for s in sessions]
        finally:
            await store.close()

    assert asyncio.run(go()) == [good]
