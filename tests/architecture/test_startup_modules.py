"""What a fresh `Runtime.open` with defaults imports (issue 27 item 4: start-up). The
modules below are built or loaded only at their first use: the service with the loop's
stages, compaction and the policy gate's stages (at the first use of ``Runtime.service``),
the read side and the services beside the loop (queries, forks, retention, webhooks), the
search tool's RE2 matchers, the command tool's process runner, the TOML reader (no config
or policy file exists), the compaction settings (no ``[compaction]`` table), exact
fractions (a ``multipleOf`` check). What can fail still fails when the runtime is opened.
Fresh processes, because the test process itself has imported everything already; the
benchmark that times them is ``benchmarks/startup.py``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from plait.adapters.tools import workspace_tools
from plait.domain.compaction import CompactionSettings
from plait.domain.errors import ConfigError
from plait.runtime import Runtime

SERVICE = (
    "plait.application._journal",
    "plait.application.compaction._context",
    "plait.application.compaction.service",
    "plait.application.compaction.stage",
    "plait.application.driver",
    "plait.application.events",
    "plait.application.governance.gate",
    "plait.application.governance.governor",
    "plait.application.governance.reviewer",
    "plait.application.service",
)
"""Built with the service, at the first use of ``Runtime.service``."""

DEFERRED = (
    *SERVICE,
    "decimal",
    "fractions",
    "plait.adapters.tools._match",
    "plait.adapters.tools._proc",
    "plait.adapters.tools._search",
    "plait.adapters.stores.sqlite.approvals",
    "plait.adapters.stores.sqlite.fork",
    "plait.adapters.stores.sqlite.retention",
    "plait.adapters.stores.sqlite.service",
    "plait.adapters.stores.sqlite.webhooks",
    "plait.application.fork",
    "plait.application.queries",
    "plait.application.retention",
    "plait.application.subagents",
    "plait.application.webhooks",
    "plait.domain.compaction",
    "plait.domain.forks",
    "plait.domain.policy_toml",
    "plait.domain.retention",
    "plait.domain.webhooks",
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
        built = (rt.service, rt.compaction, rt.queries, rt.forks, rt.retention, rt.webhooks)
        services = [type(s).__name__ for s in built]
        session = await rt.service.create_session()
        sessions = [s.id for s in await rt.queries.list_sessions()]
        print(json.dumps({"after_open": after_open, "after_use": loaded(),
                          "services": services, "sessions": sessions == [session.id],
                          "policy": type(rt.service.driver.gate).__name__,
                          "cached": rt.service is rt.service}))
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
    assert out["services"] == [
        "AgentService",
        "CompactionService",
        "Queries",
        "ForkService",
        "RetentionService",
        "WebhookService",
    ]
    assert out["sessions"] is True
    assert out["policy"] == "GovernedGate"  # the default policy governs the lazy service
    assert out["cached"] is True
    assert {
        *SERVICE,
        "plait.application.fork",
        "plait.application.queries",
        "plait.application.retention",
        "plait.application.webhooks",
    } <= set(out["after_use"])


def test_a_summarizer_model_that_cannot_be_opened_still_fails_at_open(tmp_path: Path) -> None:
    # compaction is built with the service at its first use; its summarizer's model is
    # opened when the runtime is, so a bad spec fails there as before
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"version": 1, "assistant": [{"text": "done"}]}))
    with pytest.raises(ConfigError, match="unknown model kind 'nope'"):
        Runtime.open(
            db=f"sqlite:///{tmp_path / 'p.db'}",
            model=f"scripted:{script}",
            compaction=CompactionSettings(summarizer_model="nope:judge"),
            tools=[],
        )


def test_what_the_service_refuses_still_fails_at_open(tmp_path: Path) -> None:
    # the service is built at its first use; its configuration is checked when the runtime
    # is opened, as it was when the service was built there
    read_file = workspace_tools()[0]
    with pytest.raises(ConfigError, match="tool names must be unique"):
        Runtime.open(db="memory://", tools=[read_file, read_file])
    with pytest.raises(ConfigError, match="lease_seconds must be positive"):
        Runtime.open(db="memory://", tools=[read_file], lease_seconds=0)
