"""``plait retention expire`` and ``plait retention restore``: apply the raw-history
retention policy, and put an archive back (README: Retention of raw history)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any, Protocol

from plait.adapters.shapes import restore_json, retention_json
from plait.domain.errors import ConfigError
from plait.entrypoints.cli import _loop

__all__ = ["COMMANDS", "register"]

EXIT_OK = 0


class _Output(Protocol):
    json: bool

    def emit(self, data: Any, text: str | Callable[[], str]) -> None: ...


def _days(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of days, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 days, got {text!r}")
    return value


def register(sub: Any, common: Callable[[argparse.ArgumentParser], None]) -> None:
    retention = sub.add_parser(
        "retention", help="expire or archive old raw history by the retention policy"
    )
    rsub = retention.add_subparsers(dest="retention_command", required=True, metavar="ACTION")
    expire = rsub.add_parser(
        "expire",
        help="expire (or archive) summarized messages older than N days; forks stay readable",
    )
    expire.add_argument(
        "--older-than",
        dest="older_than",
        type=_days,
        metavar="DAYS",
        help="age in days (default: [retention] raw_history_days of plait.toml)",
    )
    expire.add_argument("--session", dest="session_id", metavar="SESSION", help="only this one")
    expire.add_argument(
        "--mode",
        choices=("expire", "archive"),
        help="archive: keep the originals in an artifact first (default: [retention] mode)",
    )
    expire.add_argument(
        "--force",
        action="store_true",
        help="also expire old messages that no active summary covers (the model loses them)",
    )
    expire.add_argument(
        "--dry-run", action="store_true", help="report what would be expired; change nothing"
    )
    common(expire)
    restore = rsub.add_parser(
        "restore", help="put the originals of an archive back in place of their tombstones"
    )
    restore.add_argument("archive_id", metavar="ARCHIVE", help="the archive's artifact id")
    restore.add_argument(
        "--dry-run", action="store_true", help="report what would be restored; change nothing"
    )
    common(restore)


def _text(data: dict[str, Any]) -> str:
    verb = "would expire" if data["dry_run"] else "expired"
    expired = data["expired"]
    lines = [
        f"{verb} {len(expired)} message(s) written before {data['cutoff']} "
        f"(policy {data['policy']}, mode {data['mode']})"
    ]
    for entry in expired:
        shared = f", also in {', '.join(entry['held_by'][1:])}" if len(entry["held_by"]) > 1 else ""
        lines.append(
            f"  {entry['session_id']} [{entry['seq']}] {entry['kind']} "
            f"{entry['message_id']}{shared}"
        )
    for held in data["held_back"]:
        lines.append(f"  kept {held['messages']} old message(s): {held['reason']}")
    if data["archive_id"]:
        lines.append(f"originals archived in artifact {data['archive_id']}")
    return "\n".join(lines)


def _restore_text(data: dict[str, Any]) -> str:
    verb = "would restore" if data["dry_run"] else "restored"
    lines = [f"{verb} {len(data['restored'])} message(s) from archive {data['archive_id']}"]
    for restored in data["restored"]:
        shared = (
            f", also in {', '.join(restored['held_by'][1:])}"
            if len(restored["held_by"]) > 1
            else ""
        )
        lines.append(
            f"  {restored['session_id']} [{restored['seq']}] {restored['kind']} "
            f"{restored['message_id']}{shared}"
        )
    for held in data["held_back"]:
        lines.append(f"  left {held['messages']} archived message(s): {held['reason']}")
    return "\n".join(lines)


def _service(runtime: Any) -> Any:
    service = runtime.retention
    if service is None:
        raise ConfigError(f"the store {runtime.queries.store_info().location} keeps no tombstones")
    return service


def _restore(args: argparse.Namespace, out: _Output) -> int:
    # lazy: plait.runtime loads the application layer (~50 ms); --help does not need it
    from plait.runtime import Runtime

    runtime = Runtime.open(db=getattr(args, "db", None), store_only=True)

    async def go() -> int:
        try:
            report = await _service(runtime).restore(args.archive_id, dry_run=args.dry_run)
        finally:
            await runtime.close()
        data = restore_json(report)
        out.emit(data, lambda: _restore_text(data))
        return EXIT_OK

    return _loop.run(go())


def _expire(args: argparse.Namespace, out: _Output) -> int:
    # lazy: plait.runtime loads the application layer (~50 ms); --help does not need it
    from plait.application.retention import RetentionRequest
    from plait.runtime import Runtime, configured_retention

    settings = configured_retention()
    days = args.older_than if args.older_than is not None else settings.raw_history_days
    if days is None:
        raise ConfigError(
            "no retention age: pass --older-than DAYS or set [retention] raw_history_days "
            "in plait.toml"
        )
    request = RetentionRequest(
        older_than_days=days,
        mode=args.mode or settings.mode,
        session_id=args.session_id,
        force=args.force,
        dry_run=args.dry_run,
    )
    runtime = Runtime.open(db=getattr(args, "db", None), store_only=True)

    async def go() -> int:
        try:
            report = await _service(runtime).apply(request)
        finally:
            await runtime.close()
        data = retention_json(report)
        out.emit(data, lambda: _text(data))
        return EXIT_OK

    return _loop.run(go())


COMMANDS: dict[tuple[str, ...], Callable[[argparse.Namespace, _Output], int]] = {
    ("retention", "expire"): _expire,
    ("retention", "restore"): _restore,
}
