"""The seed's example history (section 七) on every store, and a fork service over it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from plait.adapters.stores.jsonl.store import JsonlStore
from plait.adapters.stores.memory.store import MemoryStore
from plait.adapters.stores.postgres.store import PostgresStore
from plait.adapters.stores.sqlite.store import SqliteStore
from plait.application.fork import ForkService
from plait.application.ports import Commit, ForkableStore
from plait.domain.messages import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolResult,
    ToolResultMessage,
    ToolStatus,
    UserMessage,
)
from plait.domain.session import Session, StoredMessage
from plait.testing import FixedClock
from tests.pg import empty_database

T = TypeVar("T")

STORES = ["memory", "sqlite", "jsonl", "postgres"]


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def seed_messages() -> list[Message]:
    """m1..m6 of the seed: a constraint, two tool units, a plain answer."""
    t = 1_700_000_000.0

    def call(cid: str, name: str, args: dict[str, Any]) -> tuple[ToolCall, ...]:
        return (ToolCall.create(id=cid, name=name, arguments=args),)

    def result(mid: str, cid: str, name: str, content: str) -> ToolResultMessage:
        ok = ToolResult(call_id=cid, status=ToolStatus.SUCCEEDED, content=content)
        return ToolResultMessage(id=mid, tool_name=name, result=ok, created_at=t, run_id="r0")

    return [
        UserMessage(
            id="m1",
            text="检查测试失败原因,不要修改部署配置,也不要删除已有文件",
            created_at=t,
            run_id="r0",
        ),
        AssistantMessage(
            id="m2",
            text="",
            created_at=t,
            run_id="r0",
            tool_calls=call("c1", "read_file", {"path": "package.json"}),
        ),
        result("m3", "c1", "read_file", '{"name": "demo"}'),
        AssistantMessage(
            id="m4",
            text="",
            created_at=t,
            run_id="r0",
            tool_calls=call("c2", "run_tests", {}),
        ),
        result("m5", "c2", "run_tests", "FAILED test_upgrade"),
        AssistantMessage(id="m6", text="建议升级依赖", created_at=t, run_id="r0"),
    ]


class Stores:
    """Opens the same store again (a fresh handle, as another process would)."""

    def __init__(self, kind: str, tmp: Path, pg_url: str | None = None) -> None:
        self.kind = kind
        self.tmp = tmp
        self.pg_url = pg_url
        self._memory: MemoryStore | None = None

    def open(self) -> ForkableStore:
        if self.kind == "memory":
            if self._memory is None:
                self._memory = MemoryStore()
            return self._memory
        if self.kind == "sqlite":
            return SqliteStore.open(self.tmp / "plait.db")
        if self.kind == "postgres":
            assert self.pg_url is not None
            return PostgresStore(self.pg_url)
        return JsonlStore(self.tmp / "store")


@pytest.fixture(params=STORES)
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Stores:
    if request.param != "postgres":
        return Stores(request.param, tmp_path)
    url: str = request.getfixturevalue("pg_url")
    empty_database(url)
    return Stores("postgres", tmp_path, url)


@pytest.fixture
def store(stores: Stores) -> Iterator[ForkableStore]:
    s = stores.open()
    yield s
    run(s.close())


def forks_over(store: ForkableStore, **kw: Any) -> ForkService:
    return ForkService(store=store, clock=FixedClock(), **kw)


async def seed(
    store: ForkableStore,
    sid: str = "S",
    *,
    owner: str | None = None,
    workspace: str | None = None,
) -> list[Message]:
    messages = seed_messages()
    await store.create_session(
        Session(id=sid, created_at=1_700_000_000.0, owner=owner, workspace=workspace)
    )
    await store.commit(Commit(session_id=sid, expected_version=0, messages=tuple(messages)))
    return messages


def stored(messages: list[Message]) -> list[StoredMessage]:
    return [StoredMessage(i, m) for i, m in enumerate(messages, 1)]


async def append(store: ForkableStore, sid: str, message: Message) -> None:
    session = await store.get_session(sid)
    await store.commit(
        Commit(session_id=sid, expected_version=session.version, messages=(message,))
    )


def user(mid: str, text: str) -> UserMessage:
    return UserMessage(id=mid, text=text, created_at=1_700_000_100.0)


Hook = Callable[[], Coroutine[Any, Any, None]]
