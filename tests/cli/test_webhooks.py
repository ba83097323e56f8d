"""``plait webhooks``: add (the secret printed once), list, deliveries after a run,
resume, remove, all with ``--json``; bad input and a store without workers refused with
a clear error, nothing stored."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from plait.adapters.stores import open_store
from plait.adapters.stores.sqlite.store import SqliteStore
from plait.adapters.system import SystemClock
from plait.adapters.webhook_sender import HttpxSender
from plait.application.webhooks import WebhookDispatcher
from tests.cli.conftest import Plait, write_script
from tests.webhooks.receiver import Receiver


def _send_due(db: str) -> int:
    """What a worker's delivery loop does, once."""

    async def go() -> int:
        store = open_store(db)
        assert isinstance(store, SqliteStore)
        sender = HttpxSender(timeout=5.0)
        try:
            dispatcher = WebhookDispatcher(
                store=store,
                sender=sender,
                clock=SystemClock(),
                owner="cli-test",
            )
            return await dispatcher.run_once()
        finally:
            await sender.close()
            await store.close()

    return asyncio.run(go())


@pytest.mark.slow
def test_add_list_deliveries_resume_remove(plait: Plait, tmp_path: Path) -> None:
    receiver = Receiver()
    try:
        added = plait.json(
            "webhooks", "add", receiver.url, "--events", "run.finished,approval.needed"
        )
        assert added["secret"].startswith("whsec_") and added["status"] == "active"
        assert added["events"] == ["run.finished", "approval.needed"]
        assert added["principal"] is None
        receiver.secret = added["secret"]
        text = plait.ok("webhooks", "list").out
        assert added["id"] in text and "active" in text and "whsec_" not in text
        [listed] = plait.json("webhooks", "list")["webhooks"]
        assert "secret" not in listed and listed["id"] == added["id"]
        # a run finished by `plait send` (no worker here): the delivery waits in the outbox
        model = write_script(tmp_path, "m", {"version": 1, "assistant": [{"text": "hello"}]})
        sid = plait.new_session()
        plait.ok("send", sid, "hi", "--model", model)
        [pending] = plait.json("webhooks", "deliveries", "--status", "pending")["deliveries"]
        assert pending["type"] == "run.finished" and pending["attempts"] == 0
        assert _send_due(plait.db) == 1
        [done] = plait.json("webhooks", "deliveries", "--endpoint", added["id"])["deliveries"]
        assert done["status"] == "delivered" and done["attempts"] == 1
        assert receiver.wire == [done["event_id"]]
        assert "delivered" in plait.ok("webhooks", "deliveries").out
        resumed = plait.json("webhooks", "resume", added["id"])
        assert resumed["status"] == "active"
        assert plait.json("webhooks", "remove", added["id"]) == {"id": added["id"], "removed": True}
        assert plait.json("webhooks", "list")["webhooks"] == []
        assert plait.ok("webhooks", "list").out.strip() == "no webhooks"
    finally:
        receiver.stop()


def test_bad_input_is_refused_and_nothing_is_stored(plait: Plait) -> None:
    r = plait("webhooks", "add", "ftp://example.test/x", "--events", "run.finished", "--json")
    assert r.code != 0
    err = json.loads(r.out or r.err)["error"]
    assert err["code"] == "invalid_value" and "http:// or https://" in err["message"]
    r = plait("webhooks", "add", "http://127.0.0.1:9/", "--events", "run.done", "--json")
    err = json.loads(r.out or r.err)["error"]
    assert err["code"] == "invalid_value" and "run.done" in err["message"]
    r = plait("webhooks", "remove", "wh_nope", "--json")
    assert json.loads(r.out or r.err)["error"]["code"] == "webhook_not_found"
    assert plait.json("webhooks", "list")["webhooks"] == []


def test_a_store_without_workers_refuses_webhooks(plait: Plait, tmp_path: Path) -> None:
    jsonl = f"jsonl://{tmp_path / 'j'}"
    r = plait(
        "webhooks",
        "add",
        "http://127.0.0.1:9/",
        "--events",
        "run.finished",
        "--db",
        jsonl,
        "--json",
    )
    err = json.loads(r.out or r.err)["error"]
    assert err["code"] == "config_error" and "cannot hold webhooks" in err["message"]
