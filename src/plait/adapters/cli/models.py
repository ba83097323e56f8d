"""``plait models list`` (known models and their capabilities) and ``plait models check
SPEC`` (one minimal call: auth, tool calling, streaming, one line each)."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable
from dataclasses import asdict
from typing import Any, Protocol

from plait.domain.errors import ModelError

__all__ = ["COMMANDS", "register"]

EXIT_OK, EXIT_FAILED = 0, 1


class _Output(Protocol):
    json: bool

    def emit(self, data: Any, text: str | Callable[[], str]) -> None: ...


def register(sub: Any, common: Callable[[argparse.ArgumentParser], None]) -> None:
    models = sub.add_parser("models", help="known models, and a live check of one")
    msub = models.add_subparsers(dest="models_command", required=True, metavar="ACTION")
    lst = msub.add_parser(
        "list", help="built-in models and those in plait.toml, with their capabilities"
    )
    common(lst)
    check = msub.add_parser(
        "check", help="make one minimal call to SPEC: auth, tool calling, streaming"
    )
    check.add_argument("spec", metavar="SPEC", help="e.g. openai:gpt-4o or a plait.toml name")
    common(check)


def _row(spec: str, source: str, caps: Any) -> dict[str, Any]:
    return {"spec": spec, "source": source, "capabilities": asdict(caps)}


def _price(value: float | None) -> str:
    return "?" if value is None else f"{value:g}"


def _line(row: dict[str, Any]) -> str:
    c = row["capabilities"]
    window = f"{c['context_window']:,}" if c["context_window"] else "?"
    flags = [k for k in ("tool_calls", "parallel_tool_calls", "streaming", "reasoning") if c[k]]
    prices = "/".join(
        _price(c[k])
        for k in ("price_input_per_mtok", "price_output_per_mtok", "price_cached_input_per_mtok")
    )
    return f"{row['spec']:<58} {window:>10}  ${prices:<16} {' '.join(flags)}  [{row['source']}]"


def models_list(a: argparse.Namespace, out: _Output) -> int:
    from plait.adapters.models import resolve
    from plait.adapters.models._catalog import builtin_models
    from plait.config import load_config

    config = load_config()
    rows = [_row(spec, "built-in", caps) for spec, caps in builtin_models()]
    for name, entry in sorted(config.models.items()):
        r = resolve(name, config)
        label = name if str(r.spec) == name else f"{name} = {r.spec}"
        rows.append(_row(label, entry.source, r.capabilities))
    header = f"{'SPEC':<58} {'WINDOW':>10}  {'$/MTOK in/out/cached':<17} CAPABILITIES"
    out.emit({"models": rows}, lambda: "\n".join([header, *(_line(r) for r in rows)]))
    return EXIT_OK


_PING = {"type": "object", "properties": {}, "additionalProperties": False}


async def _probe(spec: str) -> tuple[str, list[dict[str, Any]]]:
    from plait.adapters.models import open_model
    from plait.application.ports import ModelRequest
    from plait.domain.context import Context
    from plait.domain.messages import AssistantMessage, UserMessage
    from plait.domain.tools import EffectClass, ToolSpec

    ping = ToolSpec(name="ping", description="Answers pong.", parameters=_PING,
                    effect=EffectClass.READ_ONLY)  # fmt: skip
    model = open_model(spec, tools=[ping])
    deltas: list[str] = []
    context: Context[Any] = Context(
        instructions="You are checking a connection. Call the ping tool once, nothing else.",
        tools=(ping,),
        items=[UserMessage(id="msg_check", text="Call ping.", created_at=0.0)],
        output_type=AssistantMessage,
    )
    streams = model.capabilities.streaming
    request = ModelRequest(role="assistant", context=context, max_output_tokens=256,
                           on_text=deltas.append if streams else None)  # fmt: skip
    try:
        response = await model.complete(request)
    except ModelError as e:
        failed = {"ok": False, "detail": f"{e.model_code}: {e.message}"}
        skipped = {"ok": False, "detail": "not checked (the call failed)"}
        return model.name, [{"check": "auth", **failed}, {"check": "tool calling", **skipped},
                            {"check": "streaming", **skipped}]  # fmt: skip
    called = [c.name for c in response.tool_calls]
    tool_ok = called == ["ping"]
    streamed = f"streamed ({len(deltas)} text deltas)"
    no_stream = "not declared for this model (set streaming = true in plait.toml if it can)"
    return model.name, [
        {"check": "auth", "ok": True, "detail": f"answered as {response.model or model.name}"},
        {
            "check": "tool calling",
            "ok": tool_ok,
            "detail": "called ping"
            if tool_ok
            else f"asked to call ping, got {called or 'no call'}",
        },
        {"check": "streaming", "ok": streams, "detail": streamed if streams else no_stream},
    ]


def models_check(a: argparse.Namespace, out: _Output) -> int:
    name, checks = asyncio.run(_probe(a.spec))
    ok = all(c["ok"] for c in checks)
    out.emit(
        {"model": name, "ok": ok, "checks": checks},
        lambda: "\n".join(
            f"{c['check']:<13} {'ok' if c['ok'] else 'FAILED':<7} {c['detail']}" for c in checks
        ),
    )
    return EXIT_OK if ok else EXIT_FAILED


COMMANDS: dict[tuple[str, ...], Callable[[argparse.Namespace, Any], int]] = {
    ("models", "list"): models_list,
    ("models", "check"): models_check,
}
