"""Every test runs with real network access blocked (loopback still works): no test may
depend on a provider API or key. A test that really needs more opts out with
``@pytest.mark.allow_network`` (none does).

``pg_url`` is a session-wide PostgreSQL server: ``PLAIT_TEST_PG_URL`` if set, else a
throw-away cluster started here (one per test process: the suite runs in several).
Without one the PostgreSQL tests are skipped, except in CI (``CI=true``), where that is a
failure.

A suite started in the background by a shell without job control (``cmd &``, ``nohup``)
inherits SIGINT ignored, and every process it starts would too: the tests that press
Ctrl-C on plait need it delivered as a terminal delivers it, so each test process takes
Python's own handler back (a process it starts then gets SIGINT's default action)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

pytest_plugins = ["plait.testing.pytest_plugin"]

if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    given = os.environ.get("PLAIT_TEST_PG_URL")
    if given:
        worker = os.environ.get("PYTEST_XDIST_WORKER")  # gw0, gw1, ...: tests empty tables
        yield _own_database(given, f"plait_test_{worker}") if worker else given
        return
    from plait.testing.postgres import PostgresUnavailable, temporary_cluster

    try:
        cluster = temporary_cluster()
        url = cluster.__enter__()
    except PostgresUnavailable as e:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the PostgreSQL tests: {e}")
        pytest.skip(f"no PostgreSQL server: {e}")
    try:
        yield url
    finally:
        cluster.__exit__(None, None, None)


def _own_database(url: str, name: str) -> str:
    """A new, empty database ``name`` on the server at ``url`` (a ``postgresql://`` URL),
    for one test process, and its URL."""
    from urllib.parse import urlsplit, urlunsplit

    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


@pytest.fixture(autouse=True)
def _no_remembered_stream_refusals() -> Iterator[None]:
    """The process remembers servers (base URL and model) that refused a streamed call;
    a loopback server of a later test may get the same port, so each test starts with
    nothing remembered (a CI run once saw a refusal left by an earlier test)."""
    from plait.adapters.models._driver import STREAM_REFUSALS

    STREAM_REFUSALS.forget()
    yield
    STREAM_REFUSALS.forget()


@pytest.fixture(autouse=True)
def _no_user_config(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A developer's ~/.config/plait/config.toml (default model, model tables) must not
    change what a test sees; config tests write their own files."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("xdg-config")))
