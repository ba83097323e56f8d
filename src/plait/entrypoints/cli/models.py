"""``plait models list`` (known models and their capabilities) and ``plait models check
SPEC`` (one minimal call: auth, tool calling, streaming, one line each)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import asdict
from typing import Any, Protocol

from plait.entrypoints.cli import _loop

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
    capabilities = row["capabilities"]
    window = f"{capabilities['context_window']:,}" if capabilities["context_window"] else "?"
    flags = [
        k
        for k in ("tool_calls", "parallel_tool_calls", "streaming", "reasoning")
        if capabilities[k]
    ]
    prices = "/".join(
        _price(capabilities[k])
        for k in ("price_input_per_mtok", "price_output_per_mtok", "price_cached_input_per_mtok")
    )
    return f"{row['spec']:<58} {window:>10}  ${prices:<16} {' '.join(flags)}  [{row['source']}]"


def models_list(args: argparse.Namespace, out: _Output) -> int:
    # lazy: the model adapters and the settings (~25 ms) are for this command only
    from plait.adapters.models import CATALOG_DATE, CATALOG_SOURCE, builtin_models, resolve
    from plait.settings import resolve_settings

    config = resolve_settings().config
    rows = [_row(spec, "built-in", caps) for spec, caps in builtin_models()]
    for name, entry in sorted(config.models.items()):
        resolved = resolve(name, config)
        label = name if str(resolved.spec) == name else f"{name} = {resolved.spec}"
        rows.append(_row(label, entry.source, resolved.capabilities))
    header = f"{'SPEC':<58} {'WINDOW':>10}  {'$/MTOK in/out/cached':<17} CAPABILITIES"
    dated = f"built-in catalog as of {CATALOG_DATE} (refresh: scripts/refresh_catalog.py)"
    out.emit(
        {"models": rows, "catalog": {"as_of": CATALOG_DATE, "source": CATALOG_SOURCE}},
        lambda: "\n".join([dated, header, *(_line(resolved) for resolved in rows)]),
    )
    return EXIT_OK


def models_check(args: argparse.Namespace, out: _Output) -> int:
    # lazy: the model adapters (~20 ms) are for this command only
    from plait.adapters.models import check_model
    from plait.settings import resolve_settings

    settings = resolve_settings()
    name, checks = _loop.run(check_model(args.spec, config=settings.config, env=settings.environ))
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
