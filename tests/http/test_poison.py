"""Poison input at the HTTP API (issue 20, item 5): a NUL, a lone surrogate or a control
character in any field (body, path, query) is ``invalid_request`` naming the field, on
every store the API serves (memory, SQLite, PostgreSQL); never a 5xx with a traceback.
Each attack the outside test found is a test here, and a property test throws generated
strings at every field of every route the app has."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plait.adapters.stores.memory.store import MemoryStore
from plait.adapters.stores.postgres.store import PostgresStore
from plait.adapters.stores.shared.offload import Offloaded
from plait.adapters.stores.sqlite.store import SqliteStore
from plait.adapters.system import RandomIds, SystemClock
from plait.domain.service import Role
from plait.entrypoints.http.app import create_app
from plait.entrypoints.http.auth import create_key
from plait.entrypoints.http.server import Settings, context_for
from plait.runtime import Runtime
from plait.testing import FunctionModel, echo_tool
from tests.http.conftest import behaviour
from tests.pg import empty_database

T = TypeVar("T")
STORES = ["memory", "sqlite", "postgres"]


class Loop:
    """One event loop in a thread: the app, its store and the client live on it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@dataclass
class Api:
    loop: Loop
    client: httpx.AsyncClient
    rt: Runtime
    app: Any
    session_id: str
    message_id: str
    run_id: str

    def request(
        self, method: str, path: str, *, body: Any = None, params: Any = None
    ) -> httpx.Response:
        content = None if body is None else json.dumps(body).encode("ascii")  # \\u escapes
        headers = {"Content-Type": "application/json"} if body is not None else {}
        return self.loop.run(
            self.client.request(method, path, content=content, params=params, headers=headers)
        )


def _store(kind: str, tmp: Path, pg_url: str | None) -> Any:
    if kind == "memory":
        return MemoryStore()
    if kind == "sqlite":
        return Offloaded(SqliteStore.open(tmp / "plait.db"))  # as `plait serve` has it
    assert pg_url is not None
    return PostgresStore(pg_url)


@pytest.fixture(params=STORES)
def api(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Api]:
    kind = request.param
    pg_url: str | None = None
    if kind == "postgres":
        pg_url = request.getfixturevalue("pg_url")
        empty_database(pg_url)
    loop = Loop()
    store = loop.run(_async(lambda: _store(kind, tmp_path, pg_url)))
    rt = Runtime(
        store=store, artifacts=store, model=FunctionModel(behaviour, name="behaviour"),
        tools=[echo_tool().tool], clock=SystemClock(), ids=RandomIds(), lease_seconds=5.0,
    )  # fmt: skip
    settings_ = Settings(db="postgresql://x" if kind == "postgres" else f"{kind}://x")
    app = create_app(context_for(rt, settings_))

    async def setup() -> tuple[httpx.AsyncClient, str, str, str]:
        _, key = await create_key(
            store, principal="alice", role=Role.USER, clock=SystemClock(), ids=RandomIds()
        )
        client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app),
            base_url="http://plait.test",
            headers={"Authorization": f"Bearer {key}"},
        )
        session = (await client.post("/v1/sessions", json={"title": "t"})).json()
        sid = session["session_id"]
        run = (await client.post(f"/v1/sessions/{sid}/messages", json={"text": "hi"})).json()
        messages = (await client.get(f"/v1/sessions/{sid}/messages")).json()["messages"]
        return client, sid, messages[0]["message_id"], run["run_id"]

    client, sid, mid, rid = loop.run(setup())
    try:
        yield Api(loop, client, rt, app, sid, mid, rid)
    finally:
        loop.run(client.aclose())
        loop.run(rt.close())
        loop.close()


async def _async(make: Any) -> Any:
    return make()


def _error(response: httpx.Response) -> dict[str, Any]:
    body = response.json()
    assert set(body) == {"error"}, body
    return body["error"]  # type: ignore[no-any-return]


# --- the attacks found, one by one ------------------------------------------------------------

POISON = {"nul": "a\x00b", "surrogate": "a\udcffb"}


@pytest.mark.parametrize("poison", list(POISON))
def test_poisoned_session_title_is_invalid_request_not_500(api: Api, poison: str) -> None:
    r = api.request("POST", "/v1/sessions", body={"title": POISON[poison]})
    assert r.status_code == 422, r.text
    error = _error(r)
    assert error["code"] == "invalid_request"
    assert error["message"].startswith("invalid request: body.title: Value error, contains a")


@pytest.mark.parametrize("field", ["through_message_id", "request_id"])
def test_nul_in_fork_id_is_invalid_request_not_500(api: Api, field: str) -> None:
    body = {"through_message_id": api.message_id, "request_id": "r1", field: "m\x00"}
    r = api.request("POST", f"/v1/sessions/{api.session_id}/fork", body=body)
    assert r.status_code == 422, r.text
    assert _error(r)["message"] == (
        f"invalid request: body.{field}: Value error, contains a NUL character at offset 1"
    )


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/sessions/{}"),
        ("GET", "/v1/sessions/{}/runs"),
        ("GET", "/v1/sessions/{}/messages"),
        ("POST", "/v1/sessions/{}/messages"),
        ("GET", "/v1/runs/{}"),
        ("POST", "/v1/runs/{}/cancel"),
        ("GET", "/v1/runs/{}/events"),
    ],
)
def test_nul_in_path_id_is_invalid_request_not_500(api: Api, method: str, path: str) -> None:
    body = {"text": "hi"} if method == "POST" and path.endswith("messages") else None
    r = api.request(method, path.format(quote("s\x00x", safe="")), body=body)
    assert r.status_code == 422, r.text
    message = _error(r)["message"]
    assert message.startswith("invalid request: path.") and "contains a NUL" in message


@pytest.mark.parametrize("param", ["before", "owner"])
def test_nul_in_before_cursor_is_invalid_request_not_500(api: Api, param: str) -> None:
    r = api.request("GET", "/v1/sessions", params={param: "s\x00x"})
    assert r.status_code == 422, r.text
    assert _error(r)["message"] == (
        f"invalid request: query.{param}: contains a NUL character at offset 1"
    )


@pytest.mark.parametrize("poison", list(POISON))
def test_poisoned_message_text_is_invalid_request_not_500(api: Api, poison: str) -> None:
    sid = api.request("POST", "/v1/sessions", body={}).json()["session_id"]
    r = api.request("POST", f"/v1/sessions/{sid}/messages", body={"text": POISON[poison]})
    assert r.status_code == 422, r.text
    assert _error(r)["message"].startswith("invalid request: body.text: ")


@pytest.mark.parametrize("field", ["call_id", "note"])
def test_nul_in_resolution_is_invalid_request_not_500(api: Api, field: str) -> None:
    body = {"call_id": "c1", "status": "failed", "note": "checked", field: "x\x00"}
    r = api.request("POST", f"/v1/runs/{api.run_id}/resolve", body=body)
    assert r.status_code == 422, r.text
    assert _error(r)["message"].startswith(f"invalid request: body.{field}: Value error")


# --- the property: generated strings at every field of every route -----------------------------

POISON_CHARS = st.sampled_from(
    ["\x00", "\ud800", "\udcff", "\x07", "\x1b", "\x7f", "\x85", "\n", "\t", "\u2028",
     "\U0001f600", "é", "a", "/", "%", "?", "#", "..", "\\", '"', " "]
)  # fmt: skip
GENERATED = st.tuples(
    st.one_of(
        st.lists(POISON_CHARS, max_size=30).map("".join),
        st.text(st.characters(codec=None, exclude_categories=()), max_size=30),
    ),
    st.sampled_from([1, 500, 5_000, 200_000]),
)
"""(piece, times): the string is the piece repeated (small to report, large to send)."""
BODIES: dict[str, dict[str, Any]] = {
    "/v1/sessions": {"title": "t"},
    "/v1/sessions/{session_id}/messages": {"text": "hi"},
    "/v1/runs/{run_id}/resolve": {"call_id": "c1", "status": "failed", "note": "n"},
    "/v1/approvals/{approval_id}/deny": {"reason": "no"},
}


@dataclass(frozen=True)
class Field:
    method: str
    path: str
    where: str
    """``path``, ``query`` or ``body``."""
    name: str


def _fields(app: Any) -> list[Field]:
    """Every field of every route the app documents: path and query parameters, and the
    properties of request bodies (from its OpenAPI document)."""
    doc = app.openapi()
    schemas = doc.get("components", {}).get("schemas", {})
    found: list[Field] = []
    for path, operations in doc["paths"].items():
        for method, op in operations.items():
            for param in op.get("parameters", []):
                if param["in"] in ("path", "query"):
                    found.append(Field(method.upper(), path, param["in"], param["name"]))
            content = op.get("requestBody", {}).get("content", {}).get("application/json", {})
            ref = content.get("schema", {}).get("$ref", "")
            body = schemas.get(ref.rsplit("/", 1)[-1], {})
            for name in body.get("properties", {}):
                found.append(Field(method.upper(), path, "body", name))
    return found


def _send(api: Api, field: Field, value: str) -> httpx.Response:
    ids = {"session_id": api.session_id, "run_id": api.run_id, "approval_id": "apr_none"}
    body = dict(BODIES.get(field.path, {})) if field.method == "POST" else None
    if field.path.endswith("/fork"):
        body = {"through_message_id": api.message_id, "request_id": "r1"}
    params: dict[str, str] = {}
    if field.where != "body":  # a server refuses a longer request line before plait runs
        value = value[:4000]
    if field.where == "path":
        ids[field.name] = value
    elif field.where == "query":
        params[field.name] = value
    else:
        body = {**(body or {}), field.name: value}
    path = field.path
    for name, known in ids.items():
        path = path.replace("{" + name + "}", quote(known, safe="", errors="surrogatepass"))
    if params:  # the raw bytes, as a client could send them (surrogates too)
        path += "?" + "&".join(
            f"{quote(k, safe='')}={quote(v, safe='', errors='surrogatepass')}"
            for k, v in params.items()
        )
    return api.request(field.method, path, body=body)


@pytest.mark.slow
def test_generated_strings_in_every_http_field_never_give_a_5xx_or_a_stuck_run(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    fields = [f for f in _fields(api.app) if not (f.path.endswith("/events") and f.where != "path")]
    assert len({(f.path, f.where) for f in fields}) >= 15, fields
    caplog.set_level(logging.WARNING)

    @given(field=st.sampled_from(fields), value=GENERATED)
    @settings(
        max_examples=150, deadline=None, database=None,
        suppress_health_check=list(HealthCheck),
    )  # fmt: skip
    def check(field: Field, value: tuple[str, int]) -> None:
        piece, times = value
        value_ = piece * times
        caplog.clear()
        r = _send(api, field, value_)
        assert r.status_code < 500, (field, r.status_code, r.text[:500])
        if r.status_code >= 400:
            assert _error(r)["code"], r.text
        bad = [x for x in caplog.records if x.exc_info or x.levelno >= logging.ERROR]
        assert not bad, [x.getMessage() for x in bad]

    check()

    async def no_stuck_run() -> None:
        store = api.rt.store
        for run in await store.list_runs():
            if not run.status.terminal:  # queued (no worker here): it can still be ended
                run = await api.rt.service.cancel(run.id)
            assert run.status.terminal, run
            await store.read_messages(run.session_id)  # and its history reads back

    api.loop.run(no_stuck_run())
