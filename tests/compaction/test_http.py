"""Compaction over HTTP: compact now, the next call's context with its token breakdown,
evidence by reference (raw message, artifact slice, search) limited to the session's own
branch; someone else's session is ``not_found`` like a missing one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from plait.adapters.stores.shared.offload import Offloaded
from plait.adapters.stores.sqlite.store import SqliteStore
from plait.adapters.system import RandomIds, SystemClock
from plait.application.ports import ModelCapabilities, ModelRequest, ModelResponse
from plait.entrypoints.http.app import create_app
from plait.entrypoints.http.server import Settings, context_for
from plait.runtime import Runtime
from plait.testing import FunctionModel, echo_tool
from tests.http.conftest import Live, _keys, behaviour, start_server
from tests.http.test_api import error, new_session, wait_terminal

BIG = "z" * 40_000  # over the tool output cap: the echo result is kept as an artifact


async def model(request: ModelRequest) -> ModelResponse:
    if request.role == "summarizer":
        return ModelResponse(structured={"goal": "echo what the user says"}, model="m")
    return await behaviour(request)


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    yield from _serve(tmp_path, 100_000)


@pytest.fixture
def small(tmp_path: Path) -> Iterator[Live]:
    """A model with a 3,000-token window: a long message compacts after its first step."""
    yield from _serve(tmp_path, 3_000)


def _serve(tmp_path: Path, window: int | None) -> Iterator[Live]:
    path = tmp_path / "plait.db"
    keys = _keys(path)
    store: Any = Offloaded(SqliteStore.open(path))
    caps = ModelCapabilities(context_window=window, max_output_tokens=300, structured_output=True)
    rt = Runtime(
        store=store,
        artifacts=store,
        model=FunctionModel(model, name="m", capabilities=caps),
        tools=[echo_tool().tool],
        clock=SystemClock(),
        ids=RandomIds(),
        lease_seconds=5.0,
    )
    settings = Settings(db=f"sqlite:///{path}", serve_workers=1, max_body_bytes=200_000)
    server, thread, url = start_server(create_app(context_for(rt, settings)))
    try:
        yield Live(url=url, keys=keys, store_path=path)
    finally:
        server.should_exit = True
        thread.join(timeout=20)


def _talk(c: httpx.Client, sid: str, *texts: str) -> list[dict[str, Any]]:
    for text in texts:
        run = c.post(f"/v1/sessions/{sid}/messages", json={"text": text})
        assert run.status_code == 202, run.text
        assert wait_terminal(c, run.json()["run_id"])["status"] == "completed"
    messages: list[dict[str, Any]] = c.get(f"/v1/sessions/{sid}/messages").json()["messages"]
    return messages


@pytest.mark.slow
def test_compact_context_and_evidence(live: Live) -> None:
    with live.client("alice") as c:
        sid = new_session(c)["session_id"]
        msgs = _talk(c, sid, "tool first: never touch deploy/", f"tool {BIG}", "tool third")
        before = c.get(f"/v1/sessions/{sid}/context").json()
        assert before["model"] == "m" and before["summary"] is None
        assert before["tokens"]["total"] > 0 and before["raw_tail_from_seq"] == 1
        done = c.post(f"/v1/sessions/{sid}/compact")
        assert done.status_code == 200, done.text
        outcome = done.json()
        assert outcome["status"] == "compacted" and outcome["generation_after"] == 1
        after = c.get(f"/v1/sessions/{sid}/context", params={"items": "true"}).json()
        assert after["summary"]["generation"] == 1 and after["raw_tail_from_seq"] > 1
        assert after["items"][0]["source"] == "plait: constraints and summary"
        assert after["tokens"]["total"] < before["tokens"]["total"]

        first = msgs[0]["message_id"]  # summarized away, still retrievable
        got = c.get(f"/v1/sessions/{sid}/evidence", params={"message_id": first}).json()
        assert got["message"]["text"] == "tool first: never touch deploy/"
        hits = c.get(f"/v1/sessions/{sid}/evidence", params={"query": "deploy"}).json()
        assert first in [m["message_id"] for m in hits["messages"]]
        art = next(m["artifact"] for m in msgs if m.get("artifact"))
        piece = c.get(
            f"/v1/sessions/{sid}/evidence",
            params={"artifact_id": art["artifact_id"], "offset": 10, "length": 50},
        ).json()
        assert piece["content"] == BIG[5:55] and piece["size"] > 40_000

        missing = c.get(f"/v1/sessions/{sid}/evidence", params={"message_id": "msg_nope"})
        assert error(missing, 404, "not_found")["details"]["missing"] is True
        both = c.get(f"/v1/sessions/{sid}/evidence", params={"message_id": first, "query": "x"})
        error(both, 422, "invalid_request")
        # A parameter that does not go with the selector is refused, not ignored (the
        # OpenAPI document says which go together: schemathesis checks both agree).
        strays: list[dict[str, str | int]] = [
            {"message_id": first, "offset": 5},
            {"query": "x", "length": 9},
            {},
        ]
        for stray in strays:
            err = error(c.get(f"/v1/sessions/{sid}/evidence", params=stray), 422, "invalid_request")
            assert err["details"]["given"] == sorted(stray)


@pytest.mark.slow
def test_evidence_is_limited_to_the_branch(live: Live) -> None:
    with live.client("alice") as c:
        sid = new_session(c)["session_id"]
        msgs = _talk(c, sid, "tool alpha", "tool beta")
        cut = msgs[3]["message_id"]  # the answer that ends the first exchange
        fork = c.post(f"/v1/sessions/{sid}/fork", json={"through_message_id": cut,
                                                        "request_id": "f1"})  # fmt: skip
        assert fork.status_code == 201, fork.text
        branch = fork.json()["session_id"]
        later = msgs[4]["message_id"]  # "tool beta": after the fork point
        r = c.get(f"/v1/sessions/{branch}/evidence", params={"message_id": later})
        error(r, 404, "not_found")
        ok = c.get(f"/v1/sessions/{branch}/evidence", params={"message_id": msgs[0]["message_id"]})
        assert ok.status_code == 200
        beta = c.get(f"/v1/sessions/{branch}/evidence", params={"query": "beta"}).json()
        assert beta["messages"] == []


@pytest.mark.slow
def test_someone_elses_session_is_not_found(live: Live) -> None:
    with live.client("bob") as bob, live.client("alice") as alice:
        sid = new_session(bob)["session_id"]
        first = _talk(bob, sid, "tool secret", "tool more")[0]["message_id"]
        attempts = [
            alice.post(f"/v1/sessions/{sid}/compact"),
            alice.get(f"/v1/sessions/{sid}/context"),
            alice.get(f"/v1/sessions/{sid}/evidence", params={"message_id": first}),
            alice.get(f"/v1/sessions/{sid}/evidence", params={"query": "secret"}),
            alice.post("/v1/sessions/ses_nope/compact"),
        ]
        for r in attempts:
            assert "secret" not in error(r, 404, "not_found")["message"]
        assert bob.get(f"/v1/sessions/{sid}/context").json()["summary"] is None  # untouched


@pytest.mark.slow
def test_plait_send_through_the_server_shows_compactions(
    small: Live, capsys: pytest.CaptureFixture[str]
) -> None:
    from plait.entrypoints.cli.main import main

    with small.client() as c:
        sid = new_session(c)["session_id"]
    key = small.keys["alice"]
    code = main(["send", sid, "tool " + "y" * 2_400, "--server", small.url, "--api-key", key])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "[compaction activated] summarized messages 1..1" in out
    with small.client() as c:
        runs = c.get(f"/v1/sessions/{sid}/runs").json()["runs"]
        assert runs[0]["status"] == "completed"


@pytest.fixture
def windowless(tmp_path: Path) -> Iterator[Live]:
    """A model that declares no context window (automatic compaction is on)."""
    yield from _serve(tmp_path, None)


def test_a_model_without_a_window_is_the_rfc_error_in_the_service(windowless: Live) -> None:
    with windowless.client("alice") as c:
        sid = new_session(c)["session_id"]
        for r in (c.get(f"/v1/sessions/{sid}/context"), c.post(f"/v1/sessions/{sid}/compact")):
            body = r.json()["error"]
            assert r.status_code >= 400 and body["code"] == "token_meter_model_unconfigured"
            assert "declares no context window" in body["message"]
        # the server's model is known when the message is posted: refused before writing
        refused = c.post(f"/v1/sessions/{sid}/messages", json={"text": "tool hello"})
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["code"] == "token_meter_model_unconfigured"
        assert c.get(f"/v1/sessions/{sid}/runs").json()["runs"] == []


@pytest.mark.slow
def test_expired_history_is_reported_as_expired(live: Live) -> None:
    """After the retention policy expired a session's history, the messages endpoint and
    the evidence endpoint say "expired" (when, by which policy), never "missing", and
    serve none of the old content."""
    import asyncio

    from plait.application.retention import RetentionRequest, RetentionService
    from plait.testing import FixedClock

    with live.client("alice") as c:
        sid = new_session(c)["session_id"]
        msgs = _talk(c, sid, "tool first: never touch deploy/", f"tool {BIG}")
        assert c.post(f"/v1/sessions/{sid}/compact").json()["status"] == "compacted"

        async def expire() -> None:
            store = SqliteStore(live.store_path)
            later = FixedClock(SystemClock().now() + 40 * 86_400)
            try:
                report = await RetentionService(store=store, clock=later).apply(
                    RetentionRequest(older_than_days=30, force=True)
                )
                assert len(report.expired) == len(msgs)
            finally:
                await store.close()

        asyncio.run(expire())
        page = c.get(f"/v1/sessions/{sid}/messages").json()["messages"]
        assert [m["message_id"] for m in page] == [m["message_id"] for m in msgs]
        assert all(m["expired"]["policy"] == "raw_history_days=30, forced" for m in page)
        assert "deploy" not in str(page) and BIG[:100] not in str(page)
        first = c.get(f"/v1/sessions/{sid}/evidence", params={"message_id": msgs[0]["message_id"]})
        assert first.status_code == 200 and first.json()["message"]["expired"]["mode"] == "expire"
        art = next(m["artifact"] for m in msgs if m.get("artifact"))
        piece = c.get(f"/v1/sessions/{sid}/evidence", params={"artifact_id": art["artifact_id"]})
        assert piece.status_code == 200
        assert piece.json()["content"] is None and piece.json()["expired"]["digest"]
