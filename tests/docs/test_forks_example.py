"""The README's forks example from Python runs as written (issue 26 item 6: it used a
top-level ``await``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _snippet() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    at = readme.index("runtime.forks.fork_session")
    start = readme.rindex("```python\n", 0, at) + len("```python\n")
    return readme[start : readme.index("```", start)]


def _plait(cwd: Path, *argv: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "plait", *argv, "--db", "sqlite:///plait.db"],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return done.stdout


def test_the_forks_snippet_runs_as_written(tmp_path: Path) -> None:
    script = tmp_path / "one.json"
    script.write_text(json.dumps({"version": 1, "assistant": [{"text": "hello"}]}))
    sid = _plait(tmp_path, "sessions", "new").strip()
    _plait(tmp_path, "send", sid, "hi", "--model", f"scripted:{script}")
    (tmp_path / "fork_example.py").write_text(_snippet(), encoding="utf-8")
    ran = subprocess.run(
        [sys.executable, "fork_example.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    branch, through, created = ran.stdout.split()
    assert branch.startswith("ses_") and branch != sid
    assert through.startswith("msg_") and created == "True"
