"""A service process (`plait serve`, `plait worker`) freezes what it built at start-up once
start-up is done (``gc.freeze``), so a full collection while it serves does not scan the
modules, the app and the runtime again. Checked in processes of their own: the freeze is
process-wide and would change what this test process's collector does."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

FROZEN = re.compile(r"start-up objects frozen: (\d+)")


def _frozen_count(cmd: list[str], env: dict[str, str], cwd: Path) -> int:
    """Starts ``cmd``, reads its log until the freeze is reported, stops it (SIGTERM)."""
    proc = subprocess.Popen(
        cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    timer = threading.Timer(30, proc.kill)  # a process that never says it: the test fails
    timer.start()
    seen: list[str] = []
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            seen.append(line)
            if (found := FROZEN.search(line)) is not None:
                return int(found.group(1))
        raise AssertionError(f"no freeze reported; the process said: {''.join(seen)}")
    finally:
        timer.cancel()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    script = tmp_path / "m.json"
    script.write_text(json.dumps({"version": 1, "model": "m", "assistant": [{"text": "hi"}]}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLAIT_")}
    env.update(
        PLAIT_DB=f"sqlite:///{tmp_path / 'plait.db'}",
        PLAIT_MODEL=f"scripted:{script}",
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        XDG_DATA_HOME=str(tmp_path / "data"),
        **extra,
    )
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_settle_start_up_freezes_every_object_alive_then() -> None:
    probe = (
        "import gc; from plait.entrypoints.http.server import settle_start_up; "
        "assert gc.get_freeze_count() == 0; n = settle_start_up(); "
        "print(n, gc.get_freeze_count())"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], check=True, capture_output=True, text=True
    ).stdout.split()
    frozen, count = int(out[0]), int(out[1])
    assert frozen == count > 1_000  # the interpreter's and plait's modules at least


def test_a_worker_process_freezes_its_start_up_objects(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "plait", "worker", "--json"]
    assert _frozen_count(cmd, _env(tmp_path), tmp_path) > 10_000  # a runtime, a store


def test_the_api_process_freezes_its_start_up_objects(tmp_path: Path) -> None:
    env = _env(tmp_path, PLAIT_PORT=str(_free_port()), PLAIT_HOST="127.0.0.1")
    cmd = [sys.executable, "-m", "plait", "serve", "--json"]
    assert _frozen_count(cmd, env, tmp_path) > 10_000  # the app, uvicorn, the runtime
