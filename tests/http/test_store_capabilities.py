"""The API offers what its store declares in ``capabilities``, not whatever methods the
store happens to have, and refuses a store that cannot run the service."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from plait.adapters.stores.jsonl.store import JsonlStore
from plait.adapters.stores.memory.store import MemoryStore
from plait.adapters.system import RandomIds, SystemClock
from plait.domain.errors import ConfigError
from plait.entrypoints.http.app import create_app
from plait.entrypoints.http.server import Settings, context_for
from plait.runtime import Runtime


class NoWebhooksNoInbox(MemoryStore):
    """Has every method of the memory store, but says it keeps no webhooks or inbox."""

    capabilities = replace(MemoryStore.capabilities, webhooks=False, approval_inbox=False)


def _runtime(store: Any) -> Runtime:
    return Runtime(
        store=store, artifacts=store, model=None, tools=(), clock=SystemClock(), ids=RandomIds()
    )


def _paths(store: Any) -> set[str]:
    app = create_app(context_for(_runtime(store), Settings(db="memory://")))
    return set(app.openapi()["paths"])


def test_routes_follow_the_declared_capabilities() -> None:
    everything = _paths(MemoryStore())
    assert {"/v1/webhooks", "/v1/approvals"} <= everything  # the inbox: GET /v1/approvals
    fewer = _paths(NoWebhooksNoInbox())
    assert "/v1/webhooks" not in fewer and "/v1/approvals" not in fewer
    assert {"/v1/sessions", "/v1/approvals/{approval_id}/approve"} <= fewer


def test_a_store_without_a_run_queue_cannot_run_the_service(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path / "store")
    with pytest.raises(ConfigError, match="cannot run the service"):
        context_for(_runtime(store), Settings(db=f"jsonl:///{tmp_path / 'store'}"))
