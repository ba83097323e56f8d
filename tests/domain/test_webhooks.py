"""Webhook values: the Standard Webhooks signature (the specification's example vector),
secrets, event names, URLs, the retry schedule and the payload."""

from __future__ import annotations

import json

import pytest

from plait.domain.errors import ValidationError
from plait.domain.webhooks import (
    RETRY_SECONDS,
    WebhookEvent,
    check_events,
    check_url,
    event_body,
    new_secret,
    retry_delay,
    secret_key,
    sign,
)


def test_the_signature_matches_the_specification_example() -> None:
    signature = sign(
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        msg_id="msg_p5jXN8AQM9LWM0D4loKWxJek",
        timestamp=1614265330,
        body='{"test": 2432232314}',
    )
    assert signature == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_secrets() -> None:
    secret = new_secret(bytes(range(32)))
    assert secret.startswith("whsec_") and secret_key(secret) == bytes(range(32))
    with pytest.raises(ValidationError, match="24 random bytes"):
        new_secret(b"short")
    with pytest.raises(ValidationError, match="whsec_ \\+ base64"):
        secret_key("whsec_not base64!")


def test_events_and_urls() -> None:
    assert check_events(["run.finished", " run.finished ", "approval.needed"]) == (
        "run.finished",
        "approval.needed",
    )
    with pytest.raises(ValidationError, match=r"unknown webhook events \['run\.started'\]"):
        check_events(["run.started"])
    assert check_url("https://hooks.example/x") == "https://hooks.example/x"
    for bad in ("ftp://x/y", "http://", "hooks.example/x", "javascript:alert(1)"):
        with pytest.raises(ValidationError, match="http:// or https://"):
            check_url(bad)


def test_the_retry_schedule() -> None:
    assert retry_delay(1, RETRY_SECONDS, 0.0) == 5.0
    assert retry_delay(2, RETRY_SECONDS, 0.5) == pytest.approx(33.0)
    assert retry_delay(len(RETRY_SECONDS), RETRY_SECONDS, 0.0) == 12 * 3600.0
    assert retry_delay(len(RETRY_SECONDS) + 1, RETRY_SECONDS, 0.0) is None
    assert retry_delay(0, RETRY_SECONDS, 0.0) is None


def test_the_payload_is_the_same_bytes_every_time() -> None:
    event = WebhookEvent(
        id="evt_1",
        type="run.finished",
        at=0.5,
        session_id="s",
        run_id="r",
        data={"run_id": "r", "status": "completed"},
    )
    body = event_body(event)
    assert body == event_body(event)
    assert json.loads(body) == {
        "type": "run.finished",
        "timestamp": "1970-01-01T00:00:00.500000Z",
        "data": {"event_id": "evt_1", "run_id": "r", "status": "completed"},
    }
