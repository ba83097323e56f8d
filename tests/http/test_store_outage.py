"""The API over a store that cannot commit (issue 20 item 2): a request the store could
not commit is ``503 store_unavailable`` (never ``500``), ``/v1/ready`` is 503 while it
lasts, and once the fault clears every accepted run finishes without a restart (the
in-process worker lived through it).

SQLite's disk is made full with ``PRAGMA max_page_count`` on the server's own store
connection: a commit that needs a new page then fails exactly as on a full disk
(``SQLITE_FULL``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from plait.domain.errors import StoreUnavailableError
from plait.testing.postgres import Cluster
from tests.http.conftest import Live, serve_live
from tests.pg import own_cluster


def set_page_cap(live: Live, *, extra: int) -> None:
    """The store file may grow by ``extra`` pages at most (0: it is full)."""
    sqlite_store: Any = live.store.inner

    def cap(conn: sqlite3.Connection) -> None:
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {pages + extra}")

    asyncio.run(sqlite_store._db.read(cap))


def wait_until(predicate: Any, what: str, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.mark.slow
def test_sqlite_disk_full_answers_503_store_unavailable_and_every_accepted_run_finishes(
    live: Live,
) -> None:
    """Found: on a full disk ``serve``'s built-in worker stopped for good, ``/v1/ready``
    said ready and ``POST`` kept answering 202; runs stalled after space came back."""
    with live.client() as c, live.client(None) as anonymous:
        accepted: list[str] = []

        def post(i: int) -> httpx.Response:
            made = c.post("/v1/sessions", json={})
            if made.status_code != 201:  # the session itself could not be stored
                return made
            sid = made.json()["session_id"]
            answer = c.post(f"/v1/sessions/{sid}/messages", json={"text": f"tool {i}" * 300})
            if answer.status_code == 202:
                accepted.append(answer.json()["run_id"])
            return answer

        assert post(0).status_code == 202
        set_page_cap(live, extra=0)
        refused = ready = None
        for i in range(1, 60):  # the free space left in the file's pages runs out
            answer = post(i)
            assert answer.status_code in (202, 503), answer.text
            if answer.status_code != 503:
                continue
            refused = answer
            error = refused.json()["error"]
            assert error["code"] == "store_unavailable"
            assert error["details"] == {"sqlite_error": "SQLITE_FULL"}
            assert "plait.db" not in error["message"]  # where the store lives is not told
            assert refused.headers["retry-after"] == "1"
            ready = anonymous.get("/v1/ready")
            if ready.status_code == 503:
                break
            # Ready is "a commit would succeed now": a small commit of the worker's (an
            # accepted run's step) can still fit in the file's free space after the
            # refusal, and then the probe's may too; the next refusal is checked again.
        assert refused is not None, "the full store never refused a commit"
        assert ready is not None and ready.status_code == 503, ready and ready.text
        assert ready.json()["error"]["code"] == "not_ready"

        set_page_cap(live, extra=1_000_000)  # space is back

        def all_finished() -> bool:
            runs = [c.get(f"/v1/runs/{r}").json() for r in accepted]
            return all(r["status"] == "completed" for r in runs)

        wait_until(all_finished, "every accepted run to complete")
        wait_until(lambda: anonymous.get("/v1/ready").status_code == 200, "ready again")
        assert post(99).status_code == 202
        wait_until(all_finished, "a run accepted after the fault to complete")


@pytest.fixture(name="pg")
def _pg() -> Iterator[Cluster]:
    yield from own_cluster()


@pytest.mark.slow
def test_api_after_pg_restart_immediate_answers_without_stale_connection_errors(
    tmp_path: Path, pg: Cluster
) -> None:
    """Found: after ``pg_ctl restart -m immediate`` the API answered a burst of 500/503
    from pooled connections the restart had killed. Once the server is back, every
    request is answered normally and the worker of the API process goes on."""
    server = contextlib.contextmanager(serve_live)(tmp_path, pg_url=pg.url)
    with server as live, live.client() as c, live.client(None) as anonymous:
        sessions = []
        for _ in range(6):  # several pooled connections in use
            sid = c.post("/v1/sessions", json={}).json()["session_id"]
            run = c.post(f"/v1/sessions/{sid}/messages", json={"text": "tool a"}).json()
            sessions.append((sid, run["run_id"]))
        wait_until(
            lambda: all(
                c.get(f"/v1/runs/{r}").json()["status"] == "completed" for _, r in sessions
            ),
            "the runs before the restart",
        )
        pg.restart("immediate")
        answers = [c.get(f"/v1/sessions/{sid}").status_code for sid, _ in sessions]
        answers += [c.get(f"/v1/runs/{r}").status_code for _, r in sessions]
        assert answers == [200] * 12
        assert anonymous.get("/v1/ready").status_code == 200
        sid = c.post("/v1/sessions", json={}).json()["session_id"]
        answer = c.post(f"/v1/sessions/{sid}/messages", json={"text": "tool b"})
        assert answer.status_code == 202, answer.text
        run_id = answer.json()["run_id"]
        wait_until(
            lambda: c.get(f"/v1/runs/{run_id}").json()["status"] == "completed",
            "a run submitted after the restart",
        )


@pytest.mark.slow
def test_request_while_pg_is_down_answers_503_store_unavailable(
    tmp_path: Path, pg: Cluster
) -> None:
    """Found: the API answered 500 from the store's connection errors. While the server
    is down a request is ``503 store_unavailable`` and ``/v1/ready`` is 503; once it is
    back, the same requests succeed."""
    server = contextlib.contextmanager(serve_live)(tmp_path, pg_url=pg.url)
    with server as live:
        auth = {"Authorization": f"Bearer {live.keys['alice']}"}
        with httpx.Client(base_url=live.url, headers=auth, timeout=60.0) as c:
            sid = c.post("/v1/sessions", json={}).json()["session_id"]
            pg.stop("immediate")
            down = [c.get(f"/v1/sessions/{sid}"), c.post("/v1/sessions", json={})]
            for answer in down:
                assert answer.status_code == 503, answer.text
                assert answer.json()["error"]["code"] == "store_unavailable"
            assert c.get("/v1/ready").status_code == 503
            pg.start()
            wait_until(lambda: c.get("/v1/ready").status_code == 200, "ready again", 60)
            assert c.get(f"/v1/sessions/{sid}").status_code == 200
            answer = c.post(f"/v1/sessions/{sid}/messages", json={"text": "tool c"})
            assert answer.status_code == 202, answer.text


def test_an_event_stream_cut_by_a_store_outage_ends_with_store_unavailable(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A stream whose store read fails on an outage ends with an ``error`` event saying
    ``store_unavailable`` (reconnect with Last-Event-ID), logged as a warning without a
    traceback: an outage is not a defect of the server."""
    from plait.entrypoints.http.sse import _failed

    frame = _failed("run_1", StoreUnavailableError("/srv/plait.db: disk full", path="/srv"))
    data = json.loads(frame.split("data: ", 1)[1])
    assert frame.startswith("event: error\n")
    assert data["error"]["code"] == "store_unavailable"
    assert "/srv" not in frame
    [record] = [r for r in caplog.records if r.name == "plait.http"]
    assert record.levelname == "WARNING" and record.exc_info is None
