"""A principal's webhook (a tenant's, registered over HTTP) may only reach public
addresses: otherwise any tenant could make the workers POST into the deployment's own
network (the database, a cloud metadata service, an admin port). Checked when each
delivery is sent, on every address the host resolves to, and the request goes to the
address that was checked. An operator's endpoints, and deployments that say
``PLAIT_WEBHOOK_PRIVATE_NETWORKS=allow``, are not restricted."""

from __future__ import annotations

import asyncio
import ipaddress
from typing import Any

import httpx
import pytest

from plait.adapters import webhook_sender
from plait.adapters.webhook_sender import HttpxSender, check_public
from plait.domain.errors import ConfigError
from plait.domain.webhooks import DeliveryStatus
from plait.settings import resolve_settings
from tests.webhooks.receiver import Receiver
from tests.webhooks.test_outbox import World, drain, run


def test_a_principals_endpoint_on_the_loopback_is_refused_an_operators_is_not() -> None:
    tenant, operator = Receiver(), Receiver()

    async def body(w: World) -> None:
        await w.sender.close()
        w.sender = HttpxSender(timeout=5.0)  # the default: private networks refused
        ana = await w.hooks.add(tenant.url, ["run.finished"], principal="ana")
        ops = await w.hooks.add(operator.url, ["run.finished"], principal=None)
        tenant.secret, operator.secret = ana.secret, ops.secret
        await w.finished_run(owner="ana")
        await drain(w.dispatcher(schedule=()))
        assert tenant.hosts == [] and len(operator.events) == 1
        [refused] = await w.hooks.deliveries(principal=None, endpoint_id=ana.id)
        assert refused.status is DeliveryStatus.FAILED
        assert refused.last_error is not None
        assert "127.0.0.1, which is not a public address" in refused.last_error
        assert "PLAIT_WEBHOOK_PRIVATE_NETWORKS=allow" in refused.last_error

    try:
        run("memory://", body)
    finally:
        tenant.stop()
        operator.stop()


@pytest.mark.parametrize(
    "host",
    ["localhost", "127.0.0.1", "10.1.2.3", "169.254.169.254", "192.168.0.1", "100.64.0.1",
     "0.0.0.0", "[::1]", "[fe80::1]", "[::ffff:127.0.0.1]"],
)  # fmt: skip
def test_addresses_that_are_not_public_are_refused(host: str) -> None:
    with pytest.raises(OSError, match="not a public address"):
        asyncio.run(check_public(httpx.URL(f"https://{host}/hook")))


def test_a_public_address_is_the_one_sent_to() -> None:
    address = asyncio.run(check_public(httpx.URL("https://93.184.216.34:8443/hook")))
    assert address == ipaddress.ip_address("93.184.216.34")


def test_the_request_goes_to_the_checked_address_with_the_urls_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A name that resolves to another address after the check (DNS rebinding) is not
    asked again: the connection goes to the address that was checked."""
    receiver = Receiver()
    receiver.secret = "whsec_" + "A" * 32
    checked: list[str] = []

    async def resolved(url: httpx.URL) -> Any:
        checked.append(url.host)
        return ipaddress.ip_address("127.0.0.1")  # what the check found for the name

    monkeypatch.setattr(webhook_sender, "check_public", resolved)

    async def go() -> int:
        sender = HttpxSender(timeout=5.0)
        try:
            url = f"http://hooks.invalid:{receiver.port}/hook"
            return await sender.post(url, body="{}", headers={}, public_only=True)
        finally:
            await sender.close()

    try:
        asyncio.run(go())
    finally:
        receiver.stop()
    assert checked == ["hooks.invalid"]
    assert receiver.hosts == [f"hooks.invalid:{receiver.port}"]


def test_the_setting() -> None:
    env = {"HOME": "/nonexistent"}
    assert not resolve_settings(env=env, service={}).service.webhook_private_networks  # type: ignore[union-attr]
    allowed = resolve_settings(env={**env, "PLAIT_WEBHOOK_PRIVATE_NETWORKS": "allow"}, service={})
    assert allowed.service is not None and allowed.service.webhook_private_networks
    with pytest.raises(ConfigError, match="PLAIT_WEBHOOK_PRIVATE_NETWORKS must be deny or allow"):
        resolve_settings(env={**env, "PLAIT_WEBHOOK_PRIVATE_NETWORKS": "yes"}, service={})
