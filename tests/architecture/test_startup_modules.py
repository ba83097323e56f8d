"""What a fresh `Runtime.open` with defaults imports (issue 27 item 4: start-up). The
modules below are built or parsed only at their first use: the read side and the services
beside the loop (queries, forks, retention, webhooks), the search tool's RE2 matchers, the
TOML reader (no config or policy file exists), exact fractions (a ``multipleOf`` check).
Fresh processes, because the test process itself has imported everything already; the
benchmark that times them is ``benchmarks/startup.py``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

DEFERRED = (
    "decimal",
    "fractions",
    "plait.adapters.tools._match",
    "plait.adapters.tools._search",
    "plait.application.fork",
    "plait.application.queries",
    "plait.application.retention",
    "plait.application.subagents",
    "plait.application.webhooks",
    "plait.domain.policy_toml",
    "re2",
    "tomllib",
)
"""Modules `Runtime.open` with defaults must not import."""

PROBE = """\
import asyncio, json, sys
import plait

WATCHED = sys.argv[1:]

def loaded():
    return sorted(m for m in sys.modules if m in WATCHED)

async def main():
    rt = plait.Runtime.open()
    try:
        after_open = loaded()
        # first use: each is built now, over the same store
        services = [type(s).__name__ for s in (rt.queries, rt.forks, rt.retention, rt.webhooks)]
        sessions = [s.id for s in await rt.queries.list_sessions()]
        print(json.dumps({"after_open": after_open, "after_use": loaded(),
                          "services": services, "sessions": sessions}))
    finally:
        await rt.close()

asyncio.run(main())
"""


def _probe(tmp_path: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLAIT_")}
    env["XDG_DATA_HOME"] = str(tmp_path / "data")  # the default SQLite store goes there
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")  # no user config.toml
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *DEFERRED],
        env=env,
        cwd=tmp_path,  # no project plait.toml
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def test_open_with_defaults_builds_the_side_services_at_first_use(tmp_path: Path) -> None:
    out = _probe(tmp_path)
    assert out["after_open"] == []
    assert out["services"] == ["Queries", "ForkService", "RetentionService", "WebhookService"]
    assert out["sessions"] == []
    assert {
        "plait.application.fork",
        "plait.application.queries",
        "plait.application.retention",
        "plait.application.webhooks",
    } <= set(out["after_use"])
