"""``plait webhooks add/list/deliveries/remove/resume``: endpoints that receive signed
event deliveries (Standard Webhooks), sent by the workers."""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from typing import Any

from plait.adapters.shapes import delivery_json, webhook_json
from plait.domain.errors import ConfigError
from plait.domain.webhooks import EVENT_TYPES, DeliveryStatus
from plait.entrypoints.cli import _loop

__all__ = ["COMMANDS", "register"]

Common = Callable[[argparse.ArgumentParser], None]


def register(sub: Any, common: Common) -> None:
    wh = sub.add_parser("webhooks", help="endpoints notified of run events (signed, retried)")
    wsub = wh.add_subparsers(dest="webhooks_command", required=True, metavar="ACTION")
    add = wsub.add_parser("add", help="register an endpoint (its secret is printed once)")
    add.add_argument("url", help="http:// or https:// URL the deliveries are POSTed to")
    add.add_argument("--events", required=True, help="comma-separated: " + ",".join(EVENT_TYPES))
    add.add_argument(
        "--principal", help="only events of this principal's sessions (default: every one)"
    )
    common(add)
    common(wsub.add_parser("list", help="registered endpoints and their status"))
    dl = wsub.add_parser("deliveries", help="deliveries, newest first")
    dl.add_argument("--endpoint", help="of this endpoint only")
    dl.add_argument("--status", choices=[webhooks.value for webhooks in DeliveryStatus])
    dl.add_argument("--limit", type=int, default=100)
    common(dl)
    for name, text in (
        ("remove", "delete an endpoint and its deliveries"),
        ("resume", "re-enable a paused endpoint and resend what it missed"),
    ):
        parser = wsub.add_parser(name, help=text)
        parser.add_argument("webhook_id")
        common(parser)


def _with_service(args: argparse.Namespace, op: Callable[[Any], Awaitable[Any]]) -> Any:
    # lazy: plait.runtime loads the application layer (~50 ms); --help does not need it
    from plait.runtime import webhook_runtime

    runtime = webhook_runtime(getattr(args, "db", None))

    async def go() -> Any:
        try:
            service = runtime.webhooks
            if service is None:
                where = runtime.queries.store_info().location
                raise ConfigError(
                    f"the store {where} cannot hold webhooks (no workers send from it); "
                    "use sqlite:///... or postgresql://..."
                )
            return await op(service)
        finally:
            await runtime.close()

    return _loop.run(go())


def _add(args: argparse.Namespace, out: Any) -> int:
    events = args.events.split(",")
    endpoint = _with_service(
        args, lambda webhooks: webhooks.add(args.url, events, principal=args.principal)
    )
    data = {**webhook_json(endpoint), "secret": endpoint.secret}
    out.emit(
        data,
        f"{endpoint.secret}\n(webhook {endpoint.id} -> {endpoint.url} for "
        f"{', '.join(endpoint.events)}; the secret is shown once)",
    )
    return 0


def _list(args: argparse.Namespace, out: Any) -> int:
    endpoints = _with_service(args, lambda webhooks: webhooks.endpoints(principal=None))
    lines = [
        f"{e.id}  {e.status.value:<6}  {e.url}  {','.join(e.events)}"
        + (f"  principal={e.principal}" if e.principal else "")
        + (f"  ({e.paused_reason})" if e.paused_reason else "")
        for e in endpoints
    ]
    out.emit({"webhooks": [webhook_json(e) for e in endpoints]}, "\n".join(lines) or "no webhooks")
    return 0


def _deliveries(args: argparse.Namespace, out: Any) -> int:
    status = DeliveryStatus(args.status) if args.status else None
    found = _with_service(
        args,
        lambda webhooks: webhooks.deliveries(
            principal=None, endpoint_id=args.endpoint, status=status, limit=args.limit
        ),
    )
    lines = [
        f"{d.event_id}  {d.event_type:<17}  {d.endpoint_id}  {d.status.value:<9}  "
        f"attempts={d.attempts}" + (f"  last: {d.last_error}" if d.last_error else "")
        for d in found
    ]
    out.emit({"deliveries": [delivery_json(d) for d in found]}, "\n".join(lines) or "no deliveries")
    return 0


def _remove(args: argparse.Namespace, out: Any) -> int:
    _with_service(args, lambda webhooks: webhooks.remove(args.webhook_id, principal=None))
    out.emit({"id": args.webhook_id, "removed": True}, f"webhook {args.webhook_id} removed")
    return 0


def _resume(args: argparse.Namespace, out: Any) -> int:
    endpoint = _with_service(
        args, lambda webhooks: webhooks.resume(args.webhook_id, principal=None)
    )
    out.emit(webhook_json(endpoint), f"webhook {endpoint.id} is {endpoint.status.value}")
    return 0


COMMANDS: dict[tuple[str, ...], Callable[[argparse.Namespace, Any], int]] = {
    ("webhooks", "add"): _add,
    ("webhooks", "list"): _list,
    ("webhooks", "deliveries"): _deliveries,
    ("webhooks", "remove"): _remove,
    ("webhooks", "resume"): _resume,
}
