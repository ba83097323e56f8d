"""A live API server per test (uvicorn on a free loopback port, in a thread) over a
SQLite store with an in-process worker, and keys for three principals."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import httpx
import pytest
import uvicorn

from plait.adapters.stores.postgres.store import PostgresStore
from plait.adapters.stores.shared.offload import Offloaded
from plait.adapters.stores.sqlite.store import SqliteStore
from plait.adapters.system import RandomIds, SystemClock
from plait.application.governance.gate import GovernedGate
from plait.application.governance.governor import Governor
from plait.application.ports import ModelClient, ModelRequest, ModelResponse, RawToolCall
from plait.domain.messages import ToolResultMessage, ToolStatus, UserMessage
from plait.domain.policy import Action, Policy, ToolRule
from plait.domain.service import Role
from plait.domain.subagents import SubAgent
from plait.entrypoints.http.app import create_app
from plait.entrypoints.http.auth import create_key
from plait.entrypoints.http.server import Settings, context_for, uvicorn_config
from plait.runtime import Runtime
from plait.testing import FunctionModel, echo_tool
from tests.pg import empty_database


async def behaviour(request: ModelRequest) -> ModelResponse:
    """``tool ...``: one echo call, then an answer; ``slow``: waits (until cancelled);
    ``stream``: streams three text deltas; ``typed``: asked for an output schema, a text
    answer first then (corrected) a JSON one; anything else: answered at once (a denied
    call is answered by quoting its reason)."""
    items = request.context.items
    last_user = next(m for m in reversed(items) if isinstance(m, UserMessage))
    text = last_user.text
    answered_tool = isinstance(items[-1], ToolResultMessage)
    if text.startswith("slow"):
        await asyncio.sleep(60)
    if text.startswith("stream") and request.on_text is not None:
        for part in ("str", "eam", "ed"):
            request.on_text(part)
    if text.startswith("tool") and not answered_tool:
        call = RawToolCall(id=f"call_{len(items)}", name="echo", arguments={"text": text})
        return ModelResponse(text="calling echo", tool_calls=(call,))
    if text.startswith("typed") and request.context.output_schema is not None:
        if not request.context.corrections:
            return ModelResponse(text="a text answer")
        return ModelResponse(text=json.dumps({"echo": text}))
    last = items[-1]
    if isinstance(last, ToolResultMessage) and last.result.status is ToolStatus.DENIED:
        return ModelResponse(text=f"understood, not doing it: {last.result.reason}")
    return ModelResponse(text=f"answer to {text}")


@dataclass
class Live:
    url: str
    keys: dict[str, str]
    store_path: Path
    store: Any = None
    """The server's store (tests that inject a fault into it)."""

    def client(self, who: str | None = "alice") -> httpx.Client:
        headers = {} if who is None else {"Authorization": f"Bearer {self.keys[who]}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=10.0)


def _keys(path: Path) -> dict[str, str]:
    """Keys for alice, bob and root (admin) in the SQLite store at ``path``."""
    return _keys_in(lambda: SqliteStore.open(path))


def _keys_in(open_store: Callable[[], Any]) -> dict[str, str]:
    async def go() -> dict[str, str]:
        store = open_store()
        out = {}
        try:
            for name, role in (("alice", Role.USER), ("bob", Role.USER), ("root", Role.ADMIN)):
                _, out[name] = await create_key(
                    store, principal=name, role=role, clock=SystemClock(), ids=RandomIds()
                )
        finally:
            await store.close()
        return out

    return asyncio.run(go())


def start_server(app: Any, **config: Any) -> tuple[uvicorn.Server, threading.Thread, str]:
    """``config``: :func:`~plait.entrypoints.http.server.uvicorn_config`'s timeouts."""
    server = uvicorn.Server(uvicorn_config(app, host="127.0.0.1", port=0, **config))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the test server did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    return server, thread, f"http://127.0.0.1:{port}"


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    yield from serve_live(tmp_path)


@pytest.fixture
def gated(tmp_path: Path) -> Iterator[Live]:
    """Like ``live``, but every ``echo`` call needs a person's approval."""
    yield from serve_live(tmp_path, policy=ASK_ECHO)


ASK_ECHO = Policy(rules=(ToolRule(name="ask-echo", action=Action.APPROVE, tools=("echo",)),))


@pytest.fixture
def gated_pg(tmp_path: Path, pg_url: str) -> Iterator[Live]:
    """``gated`` on PostgreSQL (the API process runs its own worker here too)."""
    empty_database(pg_url)
    yield from serve_live(tmp_path, policy=ASK_ECHO, pg_url=pg_url)


@pytest.fixture
def live_pg(tmp_path: Path, pg_url: str) -> Iterator[Live]:
    empty_database(pg_url)
    yield from serve_live(tmp_path, pg_url=pg_url)


def serve_live(
    tmp_path: Path,
    *,
    policy: Policy | None = None,
    pg_url: str | None = None,
    model: ModelClient | Literal["behaviour"] | None = "behaviour",
    serve_workers: int = 2,
    workspace_root: Path | None = None,
    max_body_bytes: int = 4096,
    telemetry: Any = None,
    subagents: Sequence[SubAgent] = (),
) -> Iterator[Live]:
    """A live server; ``model`` (default: :func:`behaviour`) drives the in-process
    worker's runs (``None`` and ``serve_workers=0``: an API process without a model)."""
    path = tmp_path / "plait.db"
    store: Any
    if pg_url is None:
        keys = _keys(path)
        store = Offloaded(SqliteStore.open(path))  # as `plait serve` has it
    else:
        keys = _keys_in(lambda: PostgresStore(pg_url))
        store = PostgresStore(pg_url)
    clock, ids = SystemClock(), RandomIds()
    gate = None
    if policy is not None:
        governor = Governor(policy=policy, approvals=store, clock=clock, ids=ids)
        gate = GovernedGate(governor)
    rt = Runtime(
        store=store,
        artifacts=store,
        model=FunctionModel(behaviour, name="behaviour") if model == "behaviour" else model,
        tools=[echo_tool().tool],
        clock=clock,
        ids=ids,
        lease_seconds=5.0,
        gate=gate,
        telemetry=telemetry,
        subagents=subagents,
    )
    db = pg_url or f"sqlite:///{path}"
    settings = Settings(
        db=db,
        serve_workers=serve_workers,
        max_body_bytes=max_body_bytes,
        workspace_root=workspace_root,
        webhook_private_networks=True,  # the tests' receivers listen on the loopback
    )
    app = create_app(context_for(rt, settings))
    server, thread, url = start_server(app)
    try:
        yield Live(url=url, keys=keys, store_path=path, store=store)
    finally:
        server.should_exit = True
        thread.join(timeout=20)
