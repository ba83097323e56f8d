"""Poison input given to the CLI (issue 20, item 5): text no store can keep is refused
with exit status 2 and a clear first line, and the store is left as it was."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.conftest import Plait, snapshot, write_script


@pytest.mark.parametrize("kind", ["sqlite", "jsonl"])
def test_nul_in_a_message_file_is_refused_with_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, workspace: Path, kind: str
) -> None:
    db = (
        f"sqlite:///{tmp_path / 'store' / 'plait.db'}"
        if kind == "sqlite"
        else f"jsonl:///{tmp_path / 'jl'}"
    )
    plait = Plait(capsys, db)
    model = write_script(tmp_path, "m", {"version": 1, "assistant": [{"text": "ok"}]})
    sid = plait.new_session(workspace)
    (tmp_path / "msg.txt").write_bytes(b"hello\x00world\n")
    before = snapshot(db)
    r = plait("send", sid, "--file", str(tmp_path / "msg.txt"), "--model", model)
    assert r.code == 2, (r.out, r.err)
    assert r.err.splitlines()[0] == (
        "plait: error: the message text contains a NUL character at offset 5"
    )
    assert "Traceback" not in r.err
    assert snapshot(db) == before
