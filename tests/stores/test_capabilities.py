"""A store's ``capabilities`` value says which optional ports it implements: a flag is on
exactly when the store has every method of that port (callers trust the flags and never
probe a store for its methods)."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import pytest

from plait.adapters.stores.jsonl.store import JsonlStore
from plait.adapters.stores.memory.store import MemoryStore
from plait.adapters.stores.postgres.store import PostgresStore
from plait.adapters.stores.sqlite.store import SqliteStore
from plait.application.claiming import StartingQueue, WorkerPresence
from plait.application.ports import (
    ApprovalInbox,
    ApprovalStore,
    ArtifactStore,
    CarriesEvents,
    ContextRead,
    ForkStore,
    HistoryRead,
    KeyStore,
    ReservesConnections,
    RetentionStore,
    RunQueue,
    SessionStore,
    StoreCapabilities,
    SummaryStore,
    TokenCountStore,
    WebhookStore,
)
from plait.application.readiness import CommitProbe

PORT_OF_FLAG: dict[str, type] = {
    "approvals": ApprovalStore,
    "approval_inbox": ApprovalInbox,
    "forks": ForkStore,
    "summaries": SummaryStore,
    "context_read": ContextRead,
    "history_read": HistoryRead,
    "token_counts": TokenCountStore,
    "retention": RetentionStore,
    "run_queue": RunQueue,
    "starting_queue": StartingQueue,
    "presence": WorkerPresence,
    "carried_events": CarriesEvents,
    "webhooks": WebhookStore,
    "api_keys": KeyStore,
    "commit_probe": CommitProbe,
    "reserves_connections": ReservesConnections,
}
NOT_A_PORT = {"second_handle"}
STORES: list[type[Any]] = [MemoryStore, SqliteStore, JsonlStore, PostgresStore]


def methods_of(port: type) -> set[str]:
    """The methods a port asks for, its Protocol bases' included."""
    names: set[str] = set()
    for klass in port.__mro__:
        if klass.__module__ in ("typing", "builtins"):
            continue
        names |= {name for name in vars(klass) if not name.startswith("_")}
    return names


def test_every_flag_names_a_port() -> None:
    assert set(PORT_OF_FLAG) | NOT_A_PORT == {f.name for f in fields(StoreCapabilities)}
    assert all(methods_of(port) for port in PORT_OF_FLAG.values())


@pytest.mark.parametrize("store_class", STORES, ids=lambda c: c.__name__)
def test_a_flag_is_on_exactly_when_the_store_implements_its_port(store_class: type[Any]) -> None:
    declared = store_class.capabilities
    for flag, port in PORT_OF_FLAG.items():
        missing = {name for name in methods_of(port) if not hasattr(store_class, name)}
        assert getattr(declared, flag) == (not missing), (flag, sorted(missing))


@pytest.mark.parametrize("store_class", STORES, ids=lambda c: c.__name__)
def test_every_store_is_a_session_and_artifact_store(store_class: type[Any]) -> None:
    required = methods_of(SessionStore) | methods_of(ArtifactStore)
    assert required <= set(dir(store_class))


def test_only_the_store_kept_in_one_object_has_no_second_handle() -> None:
    assert [c.__name__ for c in STORES if not c.capabilities.second_handle] == ["MemoryStore"]


def test_all_but_leaves_out_only_what_it_names() -> None:
    every = StoreCapabilities.all_but()
    assert all(getattr(every, flag.name) for flag in fields(StoreCapabilities))
    fewer = StoreCapabilities.all_but("forks", "second_handle")
    assert not fewer.forks and not fewer.second_handle
    assert fewer.approvals and fewer.webhooks


def test_all_but_refuses_a_capability_that_does_not_exist() -> None:
    with pytest.raises(ValueError, match="no such store capability: fork"):
        StoreCapabilities.all_but("fork")
