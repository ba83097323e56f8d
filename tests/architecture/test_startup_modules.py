"""What a fresh `Runtime.open` with defaults imports (issue 27 item 4: start-up). The
modules below are built or loaded only at their first use: the service with the loop's
stages, compaction and the policy gate's stages (at the first use of ``Runtime.service``),
the read side and the services beside the loop (queries, forks, retention, webhooks), the
search tool's RE2 matchers, the command tool's process runner, the TOML reader (no config
or policy file exists), the compaction settings (no ``[compaction]`` table), exact
fractions (a ``multipleOf`` check), the SQLite store's summaries (at the first summary or
context read), the ports of models, of a tool call, of writes and of service mode, the
context, the recall tool's machinery and the file tools' operations (at their first
call), git's checks, tempfile and shutil (at the first command). What can fail still
fails when the runtime is opened. Fresh processes, because the test process itself has
imported everything already; the benchmark that times them is ``benchmarks/startup.py``."""

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
from plait.domain.errors import ConfigError, CorruptStoreError
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
    "plait.adapters.stores.shared.summary_codec",
    "plait.adapters.stores.shared.summary_state",
    "plait.adapters.stores.sqlite.summaries",
    "plait.adapters.tools._git",
    "plait.adapters.tools._match",
    "plait.adapters.tools._paths",
    "plait.adapters.tools._proc",
    "plait.adapters.tools._search",
    "plait.adapters.tools._tree",
    "plait.adapters.tools.workspace",
    "plait.adapters.stores.sqlite.approvals",
    "plait.adapters.stores.sqlite.fork",
    "plait.adapters.stores.sqlite.retention",
    "plait.adapters.stores.sqlite.service",
    "plait.adapters.stores.sqlite.webhooks",
    "plait.application.compaction._render",
    "plait.application.compaction.recall",
    "plait.application.expiries",
    "plait.application.fork",
    "plait.application.ports.calls",
    "plait.application.ports.model",
    "plait.application.ports.service",
    "plait.application.ports.system",
    "plait.application.ports.writes",
    "plait.application.queries",
    "plait.application.retention",
    "plait.application.subagents",
    "plait.application.webhooks",
    "plait.adapters.stores.shared.codec",
    "plait.adapters.stores.shared.rows",
    "plait.adapters.stores.shared.session_pages",
    "plait.adapters.stores.shared.state",
    "plait.adapters.stores.sqlite.commit",
    "plait.domain.answers",
    "plait.domain.compaction",
    "plait.domain.context",
    "plait.domain.messages",
    "plait.domain.recall",
    "plait.domain.runs",
    "plait.domain.session",
    "plait.domain.subagents",
    "plait.domain.forks",
    "plait.domain.policy_toml",
    "plait.domain.retention",
    "plait.domain.summary",
    "plait.domain.webhooks",
    "re2",
    "shutil",
    "tempfile",
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
        # the tools' first calls: a file tool, the recall tool; the store's first summary read
        from plait.application.ports import ToolInvocation
        from plait.domain.messages import ToolCall
        tools = {t.spec.name: t for t in rt.tools}
        def call(name, arguments):
            return ToolInvocation(call=ToolCall.create(id="call_1", name=name, arguments=arguments),
                                  session_id=session.id, run_id="run_1", workspace=".",
                                  idempotency_key="key_1")
        listed = await tools["list_dir"].execute(call("list_dir", {"path": "."}))
        recalled = await tools["recall"].execute(call("recall", {"query": "nothing"}))
        summary = await rt.store.get_summary(session.id)
        print(json.dumps({"after_open": after_open, "after_use": loaded(),
                          "listed": listed.content, "recalled": recalled.content,
                          "summary": summary, "tools": sorted(tools),
                          "services": services, "sessions": sessions == [session.id],
                          "policy": type(rt.service.driver.gate).__name__,
                          "cached": rt.service is rt.service}))
    finally:
        await rt.close()

asyncio.run(main())
"""


def _probe(tmp_path: Path) -> dict[str, Any]:
    (tmp_path / "marker.txt").write_text("here\n")  # in the workspace the file tool lists
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
    assert out["tools"] == [
        "edit_file",
        "list_dir",
        "read_file",
        "recall",
        "run_command",
        "search_text",
        "write_file",
    ]
    assert "marker.txt" in out["listed"]  # the file tool works once its operations load
    assert out["recalled"].startswith("missing: anything matching 'nothing'")
    assert out["summary"] is None
    assert {
        *SERVICE,
        "plait.adapters.stores.sqlite.summaries",
        "plait.adapters.tools.workspace",
        "plait.application.compaction.recall",
        "plait.application.fork",
        "plait.application.queries",
        "plait.application.retention",
        "plait.application.webhooks",
        "plait.domain.summary",
        # the store's reads and writes (a session made and listed, a summary read)
        "plait.adapters.stores.shared.rows",
        "plait.adapters.stores.shared.state",
        "plait.domain.messages",
        "plait.domain.session",
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


def test_a_store_or_a_sandbox_table_that_cannot_be_used_still_fails_at_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the store's summaries and the tools' operations load at their first use; the store
    # itself is opened and the [sandbox] table read when the runtime is opened, as before
    for name in list(os.environ):
        if name.startswith("PLAIT_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.chdir(tmp_path)
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"not a database " * 20)
    with pytest.raises(CorruptStoreError, match="not a valid plait SQLite store"):
        Runtime.open(db=f"sqlite:///{bad}")
    (tmp_path / "plait.toml").write_text("[sandbox]\nnetwrok = true\n")
    with pytest.raises(ConfigError, match=r"\[sandbox\]"):
        Runtime.open(db="memory://")
