"""Endpoints of the config (``[webhooks.NAME]``): checked with errors naming the file and
the key, registered by the workers at start-up (id ``cfg_NAME``, every principal's
events) and sent to with the secret of their ``secret_env``."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path

import pytest

from plait.application.ports import ModelRequest, ModelResponse
from plait.config import load_config
from plait.domain.errors import ConfigError
from plait.domain.webhooks import configured_endpoints
from plait.entrypoints.http.server import Settings, start_webhooks
from plait.runtime import Runtime
from plait.testing import FunctionModel
from tests.webhooks.receiver import Receiver

SECRET = "whsec_" + base64.b64encode(b"k" * 32).decode()


def _tables(tmp_path: Path, body: str) -> object:
    (tmp_path / "plait.toml").write_text(body, encoding="utf-8")
    return load_config(cwd=tmp_path, env={"XDG_CONFIG_HOME": str(tmp_path / "none")}).webhooks


def _table(url: str = "http://127.0.0.1:9/", events: str = '["run.finished"]', **more: str) -> str:
    extra = "".join(f'{k} = "{v}"\n' for k, v in more.items())
    return f'[webhooks.ops]\nurl = "{url}"\nevents = {events}\n{extra}'


@pytest.mark.parametrize(
    ("body", "env", "message"),
    [
        (
            _table(url="ftp://x", secret_env="S"),
            {"S": SECRET},
            "[webhooks.ops]: a webhook URL must be http:// or https://",
        ),
        (
            _table(events='["run.done"]', secret_env="S"),
            {"S": SECRET},
            "unknown webhook events ['run.done']",
        ),
        (_table(secret_env="S"), {}, "[webhooks.ops]: $S (its secret_env) is not set"),
        (_table(secret_env="S"), {"S": "plain"}, "$S must hold a whsec_ secret"),
        (_table(secret="x"), {}, "unknown keys ['secret']"),
        (
            _table(events='"run.finished"', secret_env="S"),
            {"S": SECRET},
            "needs url (a string), events (a list of strings)",
        ),
    ],
)
def test_bad_tables_are_refused_naming_file_and_key(
    tmp_path: Path, body: str, env: dict[str, str], message: str
) -> None:
    tables = _tables(tmp_path, body)
    with pytest.raises(ConfigError) as caught:
        configured_endpoints(tables, env)  # type: ignore[arg-type]
    assert message in caught.value.message
    assert str(tmp_path / "plait.toml") in caught.value.message


@pytest.mark.slow
def test_a_configured_endpoint_is_registered_by_the_worker_and_gets_deliveries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    receiver = Receiver()
    receiver.secret = SECRET
    (tmp_path / "plait.toml").write_text(
        f'[webhooks.ops]\nurl = "{receiver.url}"\nevents = ["run.finished"]\n'
        'secret_env = "OPS_SECRET"\n',
        encoding="utf-8",
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPS_SECRET", SECRET)
    url = f"sqlite:///{tmp_path / 'plait.db'}"

    def answer(request: ModelRequest) -> ModelResponse:
        return ModelResponse(text="done")

    async def go() -> None:
        rt = Runtime.open(db=url, model=FunctionModel(answer, name="m"), tools=())
        assert rt.webhooks is not None
        stop = asyncio.Event()
        task = start_webhooks(rt, Settings(db=url, webhook_poll_seconds=0.05), stop)
        try:
            async with asyncio.timeout(30):
                while not await rt.webhooks.endpoints(principal=None):  # noqa: ASYNC110
                    await asyncio.sleep(0.02)
                [endpoint] = await rt.webhooks.endpoints(principal=None)
                assert endpoint.id == "cfg_ops" and endpoint.principal is None
                session = await rt.service.create_session(owner="ana")
                result = await rt.service.send(session.id, "hi")
                while not receiver.events:  # noqa: ASYNC110 - another thread's
                    await asyncio.sleep(0.02)
            [payload] = receiver.events.values()
            assert payload["data"]["run_id"] == result.run.id
        finally:
            stop.set()
            await task
            await rt.close()

    try:
        asyncio.run(go())
    finally:
        receiver.stop()
