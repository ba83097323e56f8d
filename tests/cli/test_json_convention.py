"""One JSON convention across the CLI and the HTTP API (issue 26 item 5): a CLI list is
the HTTP API's object naming its items, in the shapes the HTTP API publishes (its
response models, which the OpenAPI document is made from)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel

from plait.entrypoints.http.approvals import ApprovalsOut
from plait.entrypoints.http.models import RunsOut, SessionsOut
from plait.entrypoints.http.webhooks import DeliveriesOut, WebhooksOut
from tests.cli.conftest import Plait, write_script


def _same_shape(model: type[BaseModel], data: Any) -> None:
    """``data`` is exactly an instance of ``model``: every field it has is declared, with
    the declared type (a field the HTTP shape lacks would be dropped by the round trip)."""
    assert isinstance(data, dict), data
    parsed = model.model_validate(data, strict=False)
    assert parsed.model_dump(mode="json", exclude_unset=True) == data


def test_cli_lists_are_the_http_apis_objects(plait: Plait, workspace: Path, tmp_path: Path) -> None:
    model = write_script(tmp_path, "one", {"version": 1, "assistant": [{"text": "hi"}]})
    sid = plait.new_session(workspace)
    plait.ok("send", sid, "hello", "--model", model)

    _same_shape(SessionsOut, plait.json("sessions", "list"))
    _same_shape(RunsOut, plait.json("runs", "list"))
    _same_shape(RunsOut, plait.json("runs", "list", "--session", sid))
    for argv, shape in (
        (("approvals", "list"), ApprovalsOut),
        (("webhooks", "list"), WebhooksOut),
        (("webhooks", "deliveries"), DeliveriesOut),
    ):
        data = plait.json(*argv)
        assert list(data) == list(shape.model_fields), (argv, data)
        _same_shape(shape, data)
    assert list(plait.json("runs", "recover", "--model", model)) == ["recoveries"]
    assert list(plait.json("sessions", "tree", sid)) == ["roots"]
